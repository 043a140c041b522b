//! A task that outlives two browser deaths on local Chromium.
//!
//! It serves two pages on 127.0.0.1, visits them in order, checkpoints after each, and kills
//! its own browser twice along the way. Run with:
//!
//! ```text
//! cargo run -p outlive --example local
//! ```

use std::sync::Mutex;
use std::time::Duration;

use futures::TryFutureExt;
use outlive::chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use outlive::{BoxFuture, LocalChromium, Options, Provider, Session};

#[path = "common/steps.rs"]
mod steps;

/// LocalChromium, remembering the newest browser's pid so the example can kill it.
#[derive(Default)]
struct Remembering {
    chromium: LocalChromium,
    newest_pid: Mutex<Option<u32>>,
}

impl Provider for Remembering {
    fn name(&self) -> &str {
        self.chromium.name()
    }
    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        Box::pin(self.chromium.launch().inspect_ok(|session| {
            *self.newest_pid.lock().unwrap() = session.pid();
        }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = steps::start().await?;

    let provider = Remembering::default();
    let visited = Mutex::new(Vec::new());
    let titles = outlive::outlive(
        &provider,
        |page, ctx| {
            let (visited, provider, base) = (&visited, &provider, &base);
            async move {
                println!(
                    "entry {} (resumed: {:?})",
                    ctx.attempt(),
                    ctx.resumed_from().map(|r| &r.url)
                );
                while visited.lock().unwrap().len() < 5 {
                    let n = visited.lock().unwrap().len();
                    page.goto(NavigateParams::new(format!("{base}/step/{n}")))
                        .await?;
                    let title: String = page.evaluate("document.title").await?.into_value()?;
                    visited.lock().unwrap().push(title);
                    ctx.checkpoint().await;
                    if (n == 1 && ctx.attempt() == 1) || (n == 3 && ctx.attempt() == 2) {
                        let pid = provider.newest_pid.lock().unwrap().unwrap();
                        println!("killing Chromium (pid {pid})");
                        let _ = nix_kill(pid);
                    }
                }
                Ok::<_, outlive::chromiumoxide::error::CdpError>(visited.lock().unwrap().clone())
            }
        },
        Options::new()
            .checkpoint_every(Duration::from_secs(5))
            .on_event(|e| println!("wide event: {}", e.to_json())),
    )
    .await?;
    println!("titles: {titles:?}");
    Ok(())
}

fn nix_kill(pid: u32) -> std::io::Result<()> {
    std::process::Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .status()
        .map(|_| ())
}
