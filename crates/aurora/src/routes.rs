//! The HTTP surface: one handler per route, cookie handling, and the mapping of bad input
//! to 400/413 pages.

use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{DefaultBodyLimit, Form, RawQuery, State};
use axum::http::header::{COOKIE, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{AppendHeaders, Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use crate::bank::{self, Bank, Refusal, TotpOutcome};
use crate::pages;

/// Requests with a larger body are answered 413.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// The session cookie set after the TOTP step.
pub const SESSION_COOKIE: &str = "aurora_session";

/// The short-lived cookie that carries a password-accepted sign-in to the TOTP step.
pub const PENDING_COOKIE: &str = "aurora_pending";

const MAX_PAYEE_CHARS: usize = 64;

type Shared = State<Arc<Bank>>;
type FormResult<T> = Result<Form<T>, FormRejection>;

pub(crate) fn router(bank: Arc<Bank>) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/account") }))
        .route("/login", get(login_page).post(login))
        .route("/totp", get(totp_page).post(totp))
        .route("/account", get(account))
        .route("/transfer", get(transfer_page).post(transfer))
        .route("/__counters", get(counters))
        .route("/__transfers", get(transfers))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(bank)
}

#[derive(Deserialize)]
struct LoginForm {
    username: String,
    password: String,
}

#[derive(Deserialize)]
struct TotpForm {
    code: String,
}

#[derive(Deserialize)]
struct TransferForm {
    to: String,
    amount: String,
}

async fn login_page() -> Html<String> {
    Html(pages::login(None))
}

async fn login(State(bank): Shared, form: FormResult<LoginForm>) -> Response {
    let Form(form) = match form {
        Ok(form) => form,
        Err(rejection) => return bad_form(&rejection),
    };
    let Some(pending) = bank.sign_in(&form.username, &form.password) else {
        tracing::debug!("sign-in rejected");
        let page = pages::login(Some("Wrong username or password."));
        return (StatusCode::UNAUTHORIZED, Html(page)).into_response();
    };
    let max_age = bank::PENDING_TTL.as_secs();
    let cookie =
        format!("{PENDING_COOKIE}={pending}; HttpOnly; SameSite=Lax; Path=/; Max-Age={max_age}");
    (AppendHeaders([(SET_COOKIE, cookie)]), Redirect::to("/totp")).into_response()
}

async fn totp_page(State(bank): Shared, headers: HeaderMap) -> Response {
    match cookie(&headers, PENDING_COOKIE) {
        Some(pending) if bank.is_pending(pending) => Html(pages::totp(None)).into_response(),
        _ => Redirect::to("/login").into_response(),
    }
}

async fn totp(State(bank): Shared, headers: HeaderMap, form: FormResult<TotpForm>) -> Response {
    let Form(form) = match form {
        Ok(form) => form,
        Err(rejection) => return bad_form(&rejection),
    };
    let pending = cookie(&headers, PENDING_COOKIE).unwrap_or_default();
    match bank.verify_totp(pending, &form.code) {
        TotpOutcome::NoPendingSignIn => Redirect::to("/login").into_response(),
        TotpOutcome::WrongCode => {
            tracing::debug!("totp rejected");
            let page = pages::totp(Some("Wrong code."));
            (StatusCode::UNAUTHORIZED, Html(page)).into_response()
        }
        TotpOutcome::Accepted { session } => {
            tracing::debug!("session issued");
            let cookies = AppendHeaders([
                (
                    SET_COOKIE,
                    format!("{SESSION_COOKIE}={session}; HttpOnly; SameSite=Lax; Path=/"),
                ),
                (
                    SET_COOKIE,
                    format!("{PENDING_COOKIE}=; HttpOnly; SameSite=Lax; Path=/; Max-Age=0"),
                ),
            ]);
            (cookies, Redirect::to("/account?welcome=1")).into_response()
        }
    }
}

async fn account(State(bank): Shared, headers: HeaderMap, RawQuery(query): RawQuery) -> Response {
    let welcome = query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .any(|pair| pair == "welcome=1");
    let session = cookie(&headers, SESSION_COOKIE).unwrap_or_default();
    let Some(view) = bank.poll(session, welcome) else {
        return Redirect::to("/login").into_response();
    };
    let config = &bank.config;
    let write_pref = view.welcome.then(|| config.pref());
    Html(pages::account(
        config.username(),
        &view,
        write_pref,
        bank::unix_ms(),
    ))
    .into_response()
}

async fn transfer_page(State(bank): Shared, headers: HeaderMap) -> Response {
    if !signed_in(&bank, &headers) {
        return Redirect::to("/login").into_response();
    }
    Html(pages::transfer(None)).into_response()
}

async fn transfer(
    State(bank): Shared,
    headers: HeaderMap,
    form: FormResult<TransferForm>,
) -> Response {
    if !signed_in(&bank, &headers) {
        return Redirect::to("/login").into_response();
    }
    let Form(form) = match form {
        Ok(form) => form,
        Err(rejection) => return bad_form(&rejection),
    };
    let to = form.to.trim();
    if to.is_empty() || to.chars().count() > MAX_PAYEE_CHARS {
        return bad_request("`to` must be 1 to 64 characters.");
    }
    let amount = match form.amount.trim().parse::<u64>() {
        Ok(cents) if cents > 0 => cents,
        _ => return bad_request("`amount` must be a whole number of cents above zero."),
    };
    match bank.transfer(to, amount) {
        Ok(recorded) => {
            tracing::debug!(id = recorded.id, "transfer recorded");
            Redirect::to("/account").into_response()
        }
        Err(Refusal::InsufficientFunds) => {
            let page = pages::transfer(Some("Insufficient funds."));
            (StatusCode::UNPROCESSABLE_ENTITY, Html(page)).into_response()
        }
    }
}

async fn counters(State(bank): Shared) -> Json<bank::Counters> {
    Json(bank.counters())
}

async fn transfers(State(bank): Shared) -> Json<Vec<bank::Transfer>> {
    Json(bank.transfers())
}

fn signed_in(bank: &Bank, headers: &HeaderMap) -> bool {
    cookie(headers, SESSION_COOKIE).is_some_and(|session| bank.has_session(session))
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(key, value)| (key == name).then_some(value))
}

/// 413 for an oversized body, 415 for a non-form content type, 400 for anything else.
fn bad_form(rejection: &FormRejection) -> Response {
    let status = match rejection.status() {
        status @ (StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNSUPPORTED_MEDIA_TYPE) => status,
        _ => StatusCode::BAD_REQUEST,
    };
    (status, Html(pages::problem(&rejection.body_text()))).into_response()
}

fn bad_request(message: &str) -> Response {
    (StatusCode::BAD_REQUEST, Html(pages::problem(message))).into_response()
}
