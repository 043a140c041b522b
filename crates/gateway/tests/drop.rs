//! Dropping the handle without `shutdown` still ends every Chromium and closes the port.
//! (Its own test binary: it counts this process's live children.)

mod support;

use std::time::Duration;

use solari_browser::CreateSessionOptions;

/// Live (non-zombie) child processes of this test process: the Chromium leaders it launched.
fn live_children() -> usize {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.len() > 1 && fields[0] != "Z" && fields[1] == me
        })
        .count()
}

#[tokio::test]
async fn dropping_the_handle_kills_every_chromium() {
    let gw = support::start(gateway::Config::new()).await;
    let client = support::client(&gw);
    client
        .sessions()
        .create(CreateSessionOptions::new())
        .await
        .expect("create");
    assert_eq!(live_children(), 1, "one Chromium per session");
    let addr = gw.local_addr();

    drop(gw);
    let gone = tokio::time::timeout(support::SOON, async {
        while live_children() > 0 || tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        gone.is_ok(),
        "{} Chromium left, or the port still open",
        live_children()
    );
}
