//! Server-rendered HTML. Every element a task drives has a stable id; every value from the
//! outside is escaped: `html_escape` for element text, JSON with `<` escaped inside the
//! script.

use crate::bank::AccountView;

/// The `localStorage` key the account page reads and, after sign-in, writes.
pub const PREF_KEY: &str = "aurora.pref";

pub(crate) fn login(error: Option<&str>) -> String {
    layout(
        "Sign in",
        &format!(
            r#"{}<form id="login" method="post" action="/login">
<label>Username <input id="username" name="username" autocomplete="username"></label>
<label>Password <input id="password" name="password" type="password" autocomplete="current-password"></label>
<button id="submit" type="submit">Sign in</button>
</form>"#,
            error_line(error)
        ),
    )
}

pub(crate) fn totp(error: Option<&str>) -> String {
    layout(
        "Verify",
        &format!(
            r#"{}<form id="totp" method="post" action="/totp">
<label>Code from your authenticator <input id="code" name="code" inputmode="numeric" autocomplete="one-time-code"></label>
<button id="submit" type="submit">Verify</button>
</form>"#,
            error_line(error)
        ),
    )
}

pub(crate) fn account(
    username: &str,
    view: &AccountView,
    write_pref: Option<&str>,
    now_ms: u64,
) -> String {
    let AccountView {
        balance_cents,
        polls,
        ..
    } = view;
    // JSON is a JS literal; escaping `<` keeps `</script>` in a value from ending the script.
    let fresh = write_pref.map_or_else(
        || "null".to_owned(),
        |pref| {
            serde_json::to_string(pref)
                .unwrap_or_else(|_| "null".to_owned())
                .replace('<', "\\u003c")
        },
    );
    layout(
        "Account",
        &format!(
            r#"<p>Signed in as <span id="user">{user}</span></p>
<p>Balance: <span id="balance" data-cents="{balance_cents}">{balance}</span></p>
<p>Account page served to this session: <span id="polls">{polls}</span> times</p>
<p>Server time (Unix ms): <span id="server-time">{now_ms}</span></p>
<p>Preference: <span id="pref"></span></p>
<p><a id="transfer-link" href="/transfer">Make a transfer</a></p>
<script>
(function () {{
  var key = "{PREF_KEY}";
  var fresh = {fresh};
  if (fresh !== null) localStorage.setItem(key, fresh);
  if (location.search) history.replaceState(null, "", location.pathname);
  var pref = localStorage.getItem(key);
  var el = document.getElementById("pref");
  if (pref === null) {{
    el.textContent = "MISSING";
    document.body.classList.add("broken");
  }} else {{
    el.textContent = pref;
  }}
}})();
</script>"#,
            user = html_escape::encode_text(username),
            balance = dollars(*balance_cents),
        ),
    )
}

pub(crate) fn transfer(error: Option<&str>) -> String {
    layout(
        "Transfer",
        &format!(
            r#"{}<form id="transfer" method="post" action="/transfer">
<label>To <input id="to" name="to"></label>
<label>Amount (cents) <input id="amount" name="amount" inputmode="numeric"></label>
<button id="submit" type="submit">Send</button>
</form>
<p><a id="account-link" href="/account">Back to account</a></p>"#,
            error_line(error)
        ),
    )
}

/// A page for a request the server could not use at all.
pub(crate) fn problem(message: &str) -> String {
    layout("Bad request", &error_line(Some(message)))
}

fn layout(title: &str, body: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title} · Aurora Bank</title>
<style>
body {{ font-family: sans-serif; max-width: 36rem; margin: 2rem auto; }}
body.broken {{ background: #fdd; }}
#error {{ color: #b00; }}
label {{ display: block; margin: .5rem 0; }}
</style>
</head>
<body>
<h1>Aurora Bank</h1>
{body}
</body>
</html>
"#
    )
}

fn error_line(error: Option<&str>) -> String {
    error.map_or_else(String::new, |message| {
        let message = html_escape::encode_text(message);
        format!("<p id=\"error\" role=\"alert\">{message}</p>\n")
    })
}

fn dollars(cents: u64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_values_in_html_and_script() {
        let view = AccountView {
            balance_cents: 12_345,
            polls: 2,
            welcome: true,
        };
        let html = account("<b>", &view, Some("</script><x>"), 7);
        assert!(html.contains(r#"<span id="user">&lt;b&gt;</span>"#));
        assert!(html.contains(r#"data-cents="12345">123.45<"#));
        assert!(!html.contains("</script><x>"));
        assert_eq!(html.matches("</script>").count(), 1);
        assert!(problem("a<b&c").contains("a&lt;b&amp;c"));
    }
}
