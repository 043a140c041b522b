//! Shared by the examples: a site on 127.0.0.1 whose `/step/{n}` pages are titled `step {n}`.

/// The examples' start: outlive's `info` logs on stderr, and the site served; answers its
/// base URL.
pub async fn start() -> std::io::Result<String> {
    tracing_subscriber::fmt()
        .with_env_filter("outlive=info")
        .init();
    serve().await
}

/// Serves the site in the background; answers its base URL.
pub async fn serve() -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let app = axum::Router::new().route(
        "/step/{n}",
        axum::routing::get(
            |axum::extract::Path(n): axum::extract::Path<u32>| async move {
                axum::response::Html(format!("<title>step {n}</title>"))
            },
        ),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}
