//! Rotation: the task moves to a fresh browser before the old one's predicted death, at a
//! checkpoint, and loses nothing.
//!
//! Local Chromium does not die of old age, so the example declares an 8 s lifetime: every
//! browser is left at about 5 s of age. The task visits 24 pages on 127.0.0.1, one every
//! 500 ms, checkpointing after each; it prints each entry and, at the end, the wide event
//! (`rotations`, `sessions`, `lostWorkMs`). Run with:
//!
//! ```text
//! cargo run -p outlive --example rotation
//! ```

use std::sync::Mutex;
use std::time::Duration;

use outlive::chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use outlive::{LocalChromium, Options, Rotation};

#[path = "common/steps.rs"]
mod steps;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter("outlive=info")
        .init();

    let base = steps::serve().await?;

    let visited = Mutex::new(Vec::new());
    let (result, event) = outlive::outlive_with_event(
        &LocalChromium::new(),
        |page, ctx| {
            let (visited, base) = (&visited, &base);
            async move {
                println!(
                    "entry {} (resumed: {:?})",
                    ctx.attempt(),
                    ctx.resumed_from().map(|r| &r.url)
                );
                while visited.lock().unwrap().len() < 24 {
                    let n = visited.lock().unwrap().len();
                    page.goto(NavigateParams::new(format!("{base}/step/{n}")))
                        .await?;
                    let title: String = page.evaluate("document.title").await?.into_value()?;
                    visited.lock().unwrap().push(title);
                    // The safe point: a rotation that is due ends this entry here.
                    ctx.checkpoint().await;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Ok::<_, outlive::chromiumoxide::error::CdpError>(visited.lock().unwrap().len())
            }
        },
        Options::new()
            .checkpoint_every(Duration::from_secs(1))
            .rotation(Rotation::Expected(Duration::from_secs(8))),
    )
    .await;
    println!("visited {} pages", result?);
    println!("{}", event.to_json());
    Ok(())
}
