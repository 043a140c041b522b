//! Dropping the handle without `shutdown` still ends every Chromium and closes the port.
//! (Its own test binary: it counts this process's live children.)

mod support;

/// Live (non-zombie) child processes of this test process: the Chromium leaders it launched.
fn live_children() -> usize {
    let me = std::process::id() as i32;
    procfs::process::all_processes()
        .expect("/proc")
        .flatten()
        .filter_map(|p| p.stat().ok())
        .filter(|s| s.ppid == me && support::is_live(s))
        .count()
}

#[tokio::test]
async fn dropping_the_handle_kills_every_chromium() {
    let gw = support::start(gateway::Config::new()).await;
    gw.create().await;
    assert_eq!(live_children(), 1, "one Chromium per session");
    let addr = gw.local_addr();

    drop(gw.into_inner());
    support::eventually_async("every Chromium gone and the port closed", || async {
        live_children() == 0 && tokio::net::TcpStream::connect(addr).await.is_err()
    })
    .await;
}
