//! The two-site test app (`aurora::twosite`) in real Chromium: `seed()` writes every piece
//! and `report()` reads each back; a fresh browser has none of them; the widget's storage
//! and cookie really are partitioned under the app's site.

use aurora::twosite::{self, Report, Side, TwoSite};
use futures::StreamExt;
use outlive::chromiumoxide::cdp::browser_protocol::network::Cookie;
use outlive::chromiumoxide::cdp::browser_protocol::storage::GetCookiesParams;
use outlive::chromiumoxide::{Browser, Page};
use outlive::{LocalBrowser, LocalChromium};
use tokio::task::JoinHandle;

/// A local headless Chromium with a chromiumoxide client on it.
struct Chromium {
    local: LocalBrowser,
    browser: Browser,
    pump: JoinHandle<()>,
}

impl Chromium {
    async fn start() -> Chromium {
        let local = LocalChromium::new().start().await.expect("chromium starts");
        let (browser, mut handler) = Browser::connect(local.endpoint().expose())
            .await
            .expect("connects");
        let pump = tokio::spawn(async move { while handler.next().await.is_some() {} });
        Chromium {
            local,
            browser,
            pump,
        }
    }

    /// A new tab, navigated to `url` and loaded.
    async fn open(&self, url: &str) -> Page {
        let page = self.browser.new_page("about:blank").await.expect("new tab");
        page.goto(url).await.expect("navigates");
        page
    }

    async fn cookies(&self) -> Vec<Cookie> {
        self.browser
            .execute(GetCookiesParams::default())
            .await
            .expect("Storage.getCookies")
            .result
            .cookies
    }

    async fn close(self) {
        self.pump.abort();
        self.local.close().await.expect("chromium closes");
    }
}

async fn report(page: &Page) -> Report {
    page.evaluate_expression(twosite::REPORT_JS)
        .await
        .expect("report() resolves")
        .into_value()
        .expect("report() is a Report")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_writes_every_piece_and_a_fresh_browser_has_none() {
    let site: TwoSite = twosite::spawn().await.unwrap();
    let chromium = Chromium::start().await;
    let page = chromium.open(&site.app_url()).await;

    let seeded: bool = page
        .evaluate_expression(twosite::SEED_JS)
        .await
        .expect("seed() resolves")
        .into_value()
        .unwrap();
    assert!(seeded);
    let after_seed = report(&page).await;
    assert_eq!(after_seed.missing(), Vec::<&str>::new(), "{after_seed:#?}");
    assert_eq!(after_seed, Report::seeded());

    // The widget host's cookie is stored partitioned under the app's site.
    let chips: Vec<Cookie> = chromium
        .cookies()
        .await
        .into_iter()
        .filter(|c| c.name == twosite::CHIPS_COOKIE)
        .collect();
    assert_eq!(chips.len(), 1, "{chips:#?}");
    let chips = &chips[0];
    assert_eq!(
        (chips.value.as_str(), chips.domain.as_str()),
        (twosite::CHIPS_VALUE, "localhost")
    );
    let key = chips.partition_key.as_ref().expect("a partitionKey");
    assert_eq!(key.top_level_site, "http://127.0.0.1");
    assert!(key.has_cross_site_ancestor);

    // At top level the widget origin sees neither its iframe's localStorage nor the cookie:
    // both belong to the partition of the app's site.
    let top = chromium.open(&site.widget_url()).await;
    let no_token: bool = top
        .evaluate_expression(format!(
            "localStorage.getItem({:?}) === null",
            twosite::WIDGET_TOKEN_KEY
        ))
        .await
        .unwrap()
        .into_value()
        .unwrap();
    assert!(no_token, "the token is not in the widget's own partition");
    let whoami: serde_json::Value = top
        .evaluate_expression(format!(
            "fetch({:?}).then(r => r.json())",
            twosite::WIDGET_WHOAMI_PATH
        ))
        .await
        .unwrap()
        .into_value()
        .unwrap();
    assert_eq!(whoami["chips"], false);

    // A second, fresh browser: the same page reads every piece as missing.
    let fresh = Chromium::start().await;
    let page = fresh.open(&site.app_url()).await;
    let empty = report(&page).await;
    assert_eq!(empty.present(), Vec::<&str>::new(), "{empty:#?}");
    assert_eq!(empty, Report::fresh());

    // Only seed() asked for the cookie; the fresh browser's report did not get it set.
    assert_eq!(site.hit_count(Side::Widget, twosite::WIDGET_COOKIE_PATH), 1);
    assert_eq!(site.hit_count(Side::App, twosite::APP_PATH), 2);
    assert_eq!(site.hit_count(Side::Widget, twosite::WIDGET_PATH), 3);
    assert_eq!(
        site.hit_count(Side::Widget, twosite::WIDGET_WHOAMI_PATH),
        3,
        "{:?}",
        site.hits()
    );
    assert!(
        site.hits()
            .iter()
            .all(|hit| hit.side == Side::Widget || !hit.path.starts_with("/widget")),
        "widget paths reached the app: {:?}",
        site.hits()
    );

    fresh.close().await;
    chromium.close().await;
    site.shutdown().await.unwrap();
}
