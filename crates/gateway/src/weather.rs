//! Network weather: stalls and jitter on the browser's frames to the client, so that tests
//! and benchmarks meet a bad network that is not a death.
//!
//! A stall sets a `watch<bool>` "held" flag ([`Hold`]) for its hold time. The relay's
//! browser→client writer waits while its connection's flag ([`Flow`]) or the gateway's
//! ([`Climate`]'s link) is set; frames queue meanwhile and go out in order when it clears.
//! Each flag is driven by a future its owner polls (the relay, the accept loop), so it ends
//! with its owner.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use crate::error::Error;

/// The most frame jitter accepted (as for `rtt`).
const MAX_FRAME_JITTER: Duration = Duration::from_secs(60);

/// One stall schedule: frames are held for `hold`, every `every`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stall {
    hold: Duration,
    every: Duration,
}

impl Stall {
    /// Checks `hold` and `every`; `what` names the schedule in the message.
    fn check(self, what: &str) -> Result<(), Error> {
        let Stall { hold, every } = self;
        let message = if every.is_zero() {
            format!("weather's {what} stalls need a period (every) greater than zero")
        } else if hold.is_zero() {
            format!("weather's {what} stalls need a hold greater than zero")
        } else if hold >= every {
            format!("weather's {what} hold ({hold:?}) must be shorter than its period ({every:?})")
        } else {
            return Ok(());
        };
        Err(Error::invalid_config("weather", message))
    }
}

/// Network weather on the relay: stalls and jitter on the browser's frames to the client
/// (the client's frames to the browser pass untouched). Nothing is dropped: held frames are
/// delivered, in order, when the hold ends. Set it with
/// [`Config::weather`](crate::Config::weather).
///
/// ```
/// use std::time::Duration;
/// let weather = gateway::Weather::calm()
///     .flows(Duration::from_millis(1200), Duration::from_secs(10))
///     .link(Duration::from_secs(2), Duration::from_secs(60))
///     .frame_jitter(Duration::from_millis(20));
/// assert!(gateway::Config::new().weather(weather).validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Weather {
    flows: Option<Stall>,
    link: Option<Stall>,
    frame_jitter: Duration,
}

impl Weather {
    /// No weather: frames pass as soon as the added latency lets them.
    pub fn calm() -> Self {
        Self::default()
    }

    /// Stalls each relay connection on its own schedule: the browser's frames to the client
    /// are held for `hold`, every `every`. A connection's first stall starts at a random time
    /// in `[0, every)` after it opens. `hold` must be greater than zero and less than `every`.
    ///
    /// # Default
    ///
    /// No flow stalls.
    pub fn flows(mut self, hold: Duration, every: Duration) -> Self {
        self.flows = Some(Stall { hold, every });
        self
    }

    /// Stalls the whole gateway's link on one schedule: every connection's browser→client
    /// frames are held for `hold`, every `every`, at once. New upgrades are still answered,
    /// but their frames are held too. The first stall starts at a random time in `[0, every)`
    /// after the gateway starts. `hold` must be greater than zero and less than `every`.
    ///
    /// # Default
    ///
    /// No link stalls.
    pub fn link(mut self, hold: Duration, every: Duration) -> Self {
        self.link = Some(Stall { hold, every });
        self
    }

    /// Gives each browser→client frame an extra random delay in `[0, jitter]`, order kept.
    /// At most 60 s.
    ///
    /// # Default
    ///
    /// Zero.
    pub fn frame_jitter(mut self, jitter: Duration) -> Self {
        self.frame_jitter = jitter;
        self
    }

    /// Checks every part; the error names the option `weather`.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if let Some(stall) = self.flows {
            stall.check("flows")?;
        }
        if let Some(stall) = self.link {
            stall.check("link")?;
        }
        if self.frame_jitter > MAX_FRAME_JITTER {
            return Err(Error::invalid_config(
                "weather",
                format!(
                    "weather's frame jitter must be at most 60 s, got {:?}",
                    self.frame_jitter
                ),
            ));
        }
        Ok(())
    }
}

/// A "held" flag that a stall schedule sets and clears; a writer held by it marks the stall
/// as hit.
struct Hold {
    held: watch::Sender<bool>,
    hit: AtomicBool,
}

impl Hold {
    fn new() -> Self {
        Self {
            held: watch::Sender::new(false),
            hit: AtomicBool::new(false),
        }
    }

    /// Holds during each stall of `stall`, the first at a random phase in `[0, every)` from
    /// now; counts each stall that held a frame into `hits`. Clears the flag when dropped.
    async fn drive(&self, stall: Stall, hits: &AtomicU64) -> Infallible {
        let _clear = ClearOnDrop(&self.held);
        // Not empty: validation refuses a zero period.
        let phase = rand::rng().random_range(Duration::ZERO..stall.every);
        let mut start = Instant::now() + phase;
        loop {
            sleep_until(start).await;
            // A mark left from the last stall's very end is not this stall's.
            self.hit.store(false, Ordering::Relaxed);
            self.held.send_replace(true);
            sleep_until(start + stall.hold).await;
            // Counted before the frames go, so whoever sees them sees the count.
            if self.hit.swap(false, Ordering::Relaxed) {
                hits.fetch_add(1, Ordering::Relaxed);
            }
            self.held.send_replace(false);
            start += stall.every;
        }
    }

    /// Waits until the flag is clear; returns whether it was held (and marks the stall hit).
    async fn pass(&self) -> bool {
        if !*self.held.borrow() {
            return false;
        }
        self.hit.store(true, Ordering::Relaxed);
        let mut held = self.held.subscribe();
        // The sender is `self.held`: it outlives this wait.
        let _ = held.wait_for(|held| !*held).await;
        true
    }
}

/// Clears a held flag, so that a schedule that stops mid-stall holds nothing.
struct ClearOnDrop<'a>(&'a watch::Sender<bool>);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}

/// A running gateway's weather: its link's flag, and the count of stalls that held a frame.
pub(crate) struct Climate {
    weather: Weather,
    link: Hold,
    stalls_hit: AtomicU64,
}

impl Climate {
    pub(crate) fn new(weather: Weather) -> Arc<Self> {
        Arc::new(Self {
            weather,
            link: Hold::new(),
            stalls_hit: AtomicU64::new(0),
        })
    }

    /// Runs the link's stalls for as long as the gateway polls this (for ever if none).
    pub(crate) async fn drive_link(&self) -> Infallible {
        match self.weather.link {
            Some(stall) => self.link.drive(stall, &self.stalls_hit).await,
            None => std::future::pending().await,
        }
    }

    /// Stalls, of flows or of the link, that held at least one frame.
    pub(crate) fn stalls_hit(&self) -> u64 {
        self.stalls_hit.load(Ordering::Relaxed)
    }

    /// The weather of a new relay connection.
    pub(crate) fn flow(self: &Arc<Self>) -> Flow {
        Flow {
            climate: self.clone(),
            own: Hold::new(),
        }
    }
}

/// One relay connection's weather: its own stalls, the link's, and frame jitter.
pub(crate) struct Flow {
    climate: Arc<Climate>,
    own: Hold,
}

impl Flow {
    /// Runs this connection's own stalls for as long as its relay polls this (for ever if
    /// none).
    pub(crate) async fn drive(&self) -> Infallible {
        match self.climate.weather.flows {
            Some(stall) => self.own.drive(stall, &self.climate.stalls_hit).await,
            None => std::future::pending().await,
        }
    }

    /// Waits out whatever stall (this connection's or the link's) holds frames now.
    pub(crate) async fn pass(&self) {
        // Not `||`: both are waited out, and again if one set while the other held.
        while self.own.pass().await | self.climate.link.pass().await {}
    }

    /// An extra delay for one frame, in `[0, frame_jitter]`.
    pub(crate) fn jitter(&self) -> Duration {
        match self.climate.weather.frame_jitter {
            Duration::ZERO => Duration::ZERO,
            most => rand::rng().random_range(Duration::ZERO..=most),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn bad_stalls_are_refused_naming_weather() {
        for bad in [
            Weather::calm().flows(ms(500), ms(500)),
            Weather::calm().flows(ms(600), ms(500)),
            Weather::calm().flows(Duration::ZERO, ms(500)),
            Weather::calm().link(ms(100), Duration::ZERO),
            Weather::calm().frame_jitter(Duration::from_secs(61)),
        ] {
            let err = bad.validate().unwrap_err();
            assert_eq!(err.option(), Some("weather"), "{err}");
        }
        let err = Weather::calm().link(ms(2), ms(1)).validate().unwrap_err();
        assert!(err.to_string().contains("link"), "{err}");
        assert!(Weather::calm().validate().is_ok());
    }

    /// Polls `drive` alongside `check`, in paused time.
    async fn driving<T>(
        drive: impl Future<Output = Infallible>,
        check: impl Future<Output = T>,
    ) -> T {
        tokio::select! {
            never = drive => match never {},
            out = check => out,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_holds_for_its_hold_every_period() {
        let climate = Climate::new(Weather::calm().flows(ms(300), ms(1000)));
        let flow = climate.flow();
        let mut held = flow.own.held.subscribe();
        let t0 = Instant::now();
        let times = driving(flow.drive(), async {
            let mut times = Vec::new();
            for _ in 0..2 {
                held.wait_for(|h| *h).await.unwrap();
                let set = Instant::now();
                held.wait_for(|h| !*h).await.unwrap();
                times.push((set, Instant::now() - set));
            }
            times
        })
        .await;
        assert!(
            times[0].0 - t0 < ms(1000),
            "first stall at a phase within the period"
        );
        assert_eq!(times[0].1, ms(300));
        assert_eq!(times[1].1, ms(300));
        assert_eq!(times[1].0 - times[0].0, ms(1000));
        // Nothing waited on it: no stall hit.
        assert_eq!(climate.stalls_hit(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_stall_that_held_a_frame_is_counted() {
        let climate = Climate::new(Weather::calm().flows(ms(300), ms(1000)));
        let flow = climate.flow();
        let mut held = flow.own.held.subscribe();
        driving(flow.drive(), async {
            held.wait_for(|h| *h).await.unwrap();
            let waited = Instant::now();
            flow.pass().await;
            assert_eq!(Instant::now() - waited, ms(300));
            assert_eq!(climate.stalls_hit(), 1);
            // The next stall passes untouched.
            held.wait_for(|h| *h).await.unwrap();
            held.wait_for(|h| !*h).await.unwrap();
        })
        .await;
        assert_eq!(climate.stalls_hit(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_link_holds_every_flow_and_clears_when_dropped() {
        let climate = Climate::new(Weather::calm().link(ms(400), ms(1000)));
        let (a, b) = (climate.flow(), climate.flow());
        let mut held = climate.link.held.subscribe();
        let link = climate.drive_link();
        driving(link, async {
            held.wait_for(|h| *h).await.unwrap();
            let waited = Instant::now();
            tokio::join!(a.pass(), b.pass());
            assert_eq!(Instant::now() - waited, ms(400));
        })
        .await;
        assert_eq!(climate.stalls_hit(), 1, "one stall, however many it held");

        // Dropped mid-stall: nothing stays held.
        driving(climate.drive_link(), async {
            held.wait_for(|h| *h).await.unwrap();
        })
        .await;
        assert!(!*climate.link.held.borrow());
    }

    #[test]
    fn jitter_stays_within_its_bound() {
        let climate = Climate::new(Weather::calm().frame_jitter(ms(20)));
        let flow = climate.flow();
        assert!((0..1000).all(|_| flow.jitter() <= ms(20)));
        assert_eq!(
            Climate::new(Weather::calm()).flow().jitter(),
            Duration::ZERO
        );
    }
}
