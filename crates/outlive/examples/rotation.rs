//! Rotation: the task moves to a fresh browser before the old one's predicted death, at a
//! checkpoint, and loses nothing.
//!
//! Local Chromium does not die of old age, so the example declares an 8 s lifetime: every
//! browser is left at about 5 s of age. The task visits 24 pages on 127.0.0.1, one every
//! 500 ms, checkpointing after each with the list of pages visited as its progress
//! (`Ctx::checkpoint_with`). A re-entered task reads it back (`Ctx::progress`). It prints
//! each entry and, at the end, the wide event (`rotations`, `sessions`,
//! `lostWorkMs`). Run with:
//!
//! ```text
//! cargo run -p outlive --example rotation
//! ```

use std::time::Duration;

use outlive::chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use outlive::{LocalChromium, Options, Rotation};

#[path = "common/steps.rs"]
mod steps;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = steps::start().await?;

    let outlive::Reported { result, event } = outlive::outlive_with_event(
        &LocalChromium::new(),
        |page, ctx| {
            let base = &base;
            async move {
                // The pages visited so far, saved with each checkpoint: the task keeps no
                // state outside itself.
                let mut visited: Vec<String> = ctx.progress()?.unwrap_or_default();
                println!(
                    "entry {}: resumed at {:?} with {} pages visited",
                    ctx.attempt(),
                    ctx.resumed_from().map(|r| &r.url),
                    visited.len()
                );
                while visited.len() < 24 {
                    let url = format!("{base}/step/{}", visited.len());
                    page.goto(NavigateParams::new(url)).await?;
                    visited.push(page.evaluate("document.title").await?.into_value()?);
                    // The safe point: a rotation that is due ends this entry here.
                    ctx.checkpoint_with(&visited).await;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(visited.len())
            }
        },
        Options::new()
            .checkpoint_every(Duration::from_secs(1))
            .rotation(Rotation::Expected(Duration::from_secs(8))),
    )
    .await;
    println!("visited {} pages", result.map_err(|e| e.to_string())?);
    println!("{}", event.to_json());
    Ok(())
}
