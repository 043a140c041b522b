//! Running outlive's page scripts: evaluating an expression in a page and decoding its
//! answer, the error a failed CDP call becomes, and the value codec (`js/codec.js`) that the
//! capture and restore scripts both embed.

use chromiumoxide::Page;
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;

use crate::error::{Error, ErrorKind};

/// The value codec (structured-clonable values as JSON) that both page scripts embed.
pub(super) const CODEC_JS: &str = include_str!("../js/codec.js");

/// A failed CDP call (`what`) as an error, with the cause as its source.
pub(super) fn cdp_error(what: &str, e: chromiumoxide::error::CdpError) -> Error {
    Error::new(ErrorKind::Cdp, format!("{what} failed")).with_source(e)
}

/// The `Runtime.evaluate` call for `expression` (its promise awaited, its value returned), in
/// `context` if given.
pub(super) fn evaluate_params(
    expression: String,
    context: Option<i64>,
) -> Result<EvaluateParams, Error> {
    let mut b = EvaluateParams::builder()
        .expression(expression)
        .await_promise(true)
        .return_by_value(true);
    if let Some(c) = context {
        b = b.context_id(chromiumoxide::cdp::js_protocol::runtime::ExecutionContextId::new(c));
    }
    b.build()
        .map_err(|e| Error::new(ErrorKind::Cdp, format!("building a page script: {e}")))
}

/// Runs `expression` in the page (in `context`, or the top frame's main world) and decodes
/// what it answers; `what` names the step in errors.
pub(super) async fn evaluate<T: serde::de::DeserializeOwned>(
    page: &Page,
    expression: String,
    context: Option<i64>,
    what: &str,
) -> Result<T, Error> {
    page.evaluate_expression(evaluate_params(expression, context)?)
        .await
        .map_err(|e| cdp_error(what, e))?
        .into_value()
        .map_err(|e| {
            Error::new(
                ErrorKind::Cdp,
                format!("decoding the answer of {what} failed"),
            )
            .with_source(e)
        })
}

/// Runs `expression` in whatever document the top frame holds when the browser gets to it,
/// and decodes what it answers. It is `Runtime.evaluate` with no context: the context
/// chromiumoxide last saw can be the document before a navigation that has just committed.
pub(super) async fn evaluate_now<T: serde::de::DeserializeOwned>(
    page: &Page,
    expression: String,
    what: &str,
) -> Result<T, Error> {
    let reply = page
        .execute(evaluate_params(expression, None)?)
        .await
        .map_err(|e| cdp_error(what, e))?
        .result;
    if reply.exception_details.is_some() {
        // Not V8's message: it quotes the text around the fault (restore data is secret).
        return Err(Error::new(
            ErrorKind::Cdp,
            format!("{what} failed: the page script threw"),
        ));
    }
    serde_json::from_value(reply.result.value.unwrap_or_default()).map_err(|e| {
        Error::new(
            ErrorKind::Cdp,
            format!("decoding the answer of {what} failed"),
        )
        .with_source(e)
    })
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::checkpoint::test_support::{chromium_page, read_value};

    /// The codec in real Chromium: every supported type, and 256 generated values (nested
    /// arrays, objects, Maps and Sets of them), come back as the same types and contents;
    /// the unsupported ones are refused as `Unsupported` (what capture counts), never
    /// mangled.
    #[tokio::test]
    async fn the_codec_round_trips_every_supported_type_in_chromium() {
        use proptest::strategy::{Strategy, ValueTree};
        use proptest::test_runner::TestRunner;

        let mut runner = TestRunner::deterministic();
        let strategy = js_value();
        let mut cases: Vec<String> = [
            "'text ✓ \\u2028'",
            "42",
            "-0",
            "NaN",
            "Infinity",
            "-Infinity",
            "true",
            "null",
            "undefined",
            "12345678901234567890n",
            "new Date(1700000000123)",
            "new Date(NaN)",
            "/a+b?/gi",
            "new Uint8Array([1, 2, 255])",
            "new Int16Array([-1, 300])",
            "new Float64Array([1.5, -0.25])",
            "new BigInt64Array([-5n])",
            "new Uint8Array([0, 1, 2, 3, 4]).subarray(1, 4)",
            "new Uint8Array([9, 8]).buffer",
            "new DataView(new Uint8Array([7, 6, 5]).buffer)",
            "new Map([['k', 1], [2, 'v']])",
            "new Set([1, 'a', null])",
            "new Blob([new Uint8Array([1, 2])], {type: 'image/png'})",
            "new File(['hi'], 'a.txt', {type: 'text/plain', lastModified: 1700000000000})",
            "new TypeError('boom')",
            "new Number(5)",
            "new String('s')",
            "new Boolean(false)",
            "{'$t': 'd', v: 1}",
            "{['__proto__']: {a: 1}}",
            "Object.create(null)",
        ]
        .map(String::from)
        .to_vec();
        for _ in 0..256 {
            cases.push(strategy.new_tree(&mut runner).unwrap().current());
        }
        let unsupported = [
            "() => 1",
            "Symbol('s')",
            "(() => { const o = {}; o.self = [o]; return o; })()",
            "new WeakMap()",
            "new (class Thing { constructor() { this.a = 1; } })()",
            "new ImageData(1, 1)",
        ];
        let expression = format!(
            "(async () => {{\n{CODEC_JS}\nreturn ({})([{}], [{}]);\n}})()",
            include_str!("../js/codec_check.js"),
            cases.join(",\n"),
            unsupported.join(",\n"),
        );

        let (_chromium, _browser, _pump, page) = chromium_page().await;
        #[derive(Deserialize)]
        struct Checked {
            failed: Vec<usize>,
            #[serde(rename = "notRefused")]
            not_refused: Vec<usize>,
            checked: usize,
        }
        let checked: Checked = read_value(&page, expression).await;
        let failed: Vec<&str> = checked.failed.iter().map(|&i| cases[i].as_str()).collect();
        let not_refused: Vec<&str> = checked
            .not_refused
            .iter()
            .map(|&i| unsupported[i])
            .collect();
        assert!(
            failed.is_empty(),
            "values that did not round-trip: {failed:#?}"
        );
        assert!(not_refused.is_empty(), "not refused: {not_refused:?}");
        assert_eq!(checked.checked, cases.len() + unsupported.len());
    }

    /// A JavaScript expression for a random structured-clonable value.
    fn js_value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let number = any::<f64>().prop_map(|f| {
            if f.is_nan() {
                "NaN".to_owned()
            } else if f.is_infinite() {
                if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
            } else if f == 0.0 && f.is_sign_negative() {
                "-0".to_owned()
            } else {
                format!("{f:e}")
            }
        });
        let string = any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap());
        let bytes = proptest::collection::vec(any::<u8>(), 0..24);
        let leaf = prop_oneof![
            number,
            string,
            any::<bool>().prop_map(|b| b.to_string()),
            Just("null".to_owned()),
            Just("undefined".to_owned()),
            any::<i64>().prop_map(|n| format!("{n}n")),
            (-8_640_000_000_000_000i64..8_640_000_000_000_000)
                .prop_map(|ms| format!("new Date({ms})")),
            bytes.clone().prop_map(|b| format!("new Uint8Array({b:?})")),
            proptest::collection::vec(any::<i32>(), 0..8)
                .prop_map(|v| format!("new Int32Array({v:?})")),
            proptest::collection::vec(-1e9f64..1e9, 0..8)
                .prop_map(|v| format!("new Float32Array({v:?})")),
            bytes
                .clone()
                .prop_map(|b| format!("new Uint8Array({b:?}).buffer")),
            (bytes.clone(), "[a-z]{0,5}/[a-z]{0,5}")
                .prop_map(|(b, t)| format!("new Blob([new Uint8Array({b:?})], {{type: '{t}'}})")),
            ("[a-z./]{0,8}", "[a-z]{1,8}").prop_map(|(src, flags)| {
                let flags: String = flags
                    .chars()
                    .filter(|c| "dgimsuy".contains(*c))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                format!(
                    "new RegExp({}, '{flags}')",
                    serde_json::to_string(&src).unwrap()
                )
            }),
        ];
        let key = prop_oneof![
            "[a-z$_0-9]{0,4}",
            Just("$t".to_owned()),
            Just("__proto__".to_owned())
        ];
        leaf.prop_recursive(3, 32, 4, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(", "))),
                proptest::collection::vec((key.clone(), inner.clone()), 0..4).prop_map(|v| {
                    let fields: Vec<String> = v
                        .iter()
                        .map(|(k, x)| format!("[{}]: {x}", serde_json::to_string(k).unwrap()))
                        .collect();
                    format!("{{{}}}", fields.join(", "))
                }),
                proptest::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(|v| {
                    let pairs: Vec<String> = v.iter().map(|(k, x)| format!("[{k}, {x}]")).collect();
                    format!("new Map([{}])", pairs.join(", "))
                }),
                proptest::collection::vec(inner, 0..4)
                    .prop_map(|v| format!("new Set([{}])", v.join(", "))),
            ]
        })
    }
}
