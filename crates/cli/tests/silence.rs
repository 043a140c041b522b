//! A silent death while the task waits on a command is noticed within about a second, not at
//! the idle heartbeat's pace. The relay asks the browser as soon as nothing at all has come
//! from it for a few round trips while a command is in flight.
//!
//! The heartbeat is set to 30 s + 30 s here, so the idle path alone would take a minute; the
//! test passes only if the waiting path noticed.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway::DeathMode;
use outlive::chromiumoxide::error::CdpError;
use outlive::{DeathCause, Milestone};
use std::time::Instant;

#[tokio::test]
async fn a_silent_death_during_a_waiting_command_is_noticed_fast() {
    let (gw, provider) = support::fault_bed(0).await;
    let (on_milestone, mut milestones) = support::milestones();
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let options = support::quiet()
        .heartbeat_interval(Duration::from_secs(30))
        .heartbeat_timeout(Duration::from_secs(30))
        .on_milestone(on_milestone);
    let outlive::Reported { result, event } = outlive::outlive_with_event(
        &provider,
        |page, ctx| {
            let (gw, provider, killed_at) = (&gw, &provider, killed_at.clone());
            async move {
                if ctx.attempt() > 1 {
                    return Ok::<_, CdpError>(ctx.attempt());
                }
                // A command that waits (a promise that never settles), then the connection goes
                // silent under it.
                let waiting = page.evaluate_expression("new Promise(() => {})");
                let kill = async {
                    // The command is on the wire once the page answers a later one.
                    page.evaluate_expression("1").await?;
                    gw.kill(&provider.newest(), DeathMode::Silence)
                        .await
                        .unwrap();
                    *killed_at.lock().unwrap() = Some(Instant::now());
                    Ok::<_, CdpError>(())
                };
                let (waited, killed) = tokio::join!(waiting, kill);
                killed?;
                waited?;
                unreachable!("the promise never settles");
            }
        },
        options,
    )
    .await;
    assert_eq!(result.unwrap(), 2);
    assert_eq!(event.relaunches, 1);
    let died = loop {
        match milestones.recv().await.expect("a death milestone") {
            Milestone::Died {
                cause, detected_at, ..
            } => break (cause, detected_at),
            _ => continue,
        }
    };
    assert_eq!(died.0, DeathCause::Silence);
    let killed_at = killed_at.lock().unwrap().expect("the kill returned");
    let noticed = died.1.saturating_duration_since(killed_at);
    eprintln!("silence noticed {noticed:?} after the kill returned");
    // ~0.85 s expected (quiet 250 ms + probe timeout 600 ms); the idle path would take 60 s.
    // The bound leaves room for a loaded machine without letting the idle path pass.
    assert!(
        noticed < Duration::from_secs(10),
        "noticed after {noticed:?}"
    );
    support::finish_clean(gw).await;
}
