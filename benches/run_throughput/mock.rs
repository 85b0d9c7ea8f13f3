//! The mock OpenAI-compatible provider the bench calls: every request is answered with
//! [`ANSWER`] after a fixed latency, and nothing is kept per request, so a long run does
//! not slow it down. It serves until it is killed; its address is the first line it
//! prints.

use std::time::{Duration, Instant};

/// The mock's answer: a valid object, as an OpenAI-compatible provider sends it.
pub const ANSWER: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","model":"bench-model","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"{\"label\":\"ok\",\"score\":0.9}"}}],"usage":{"prompt_tokens":40,"completion_tokens":9,"total_tokens":49}}"#;

/// Serves the mock on a port of 127.0.0.1.
///
/// With a latency, each connection has a thread of its own, which sleeps out the latency
/// and writes the answer itself. A 50 ms mock on tokio's timer answered after 51.5 ms on
/// average (the timer rounds a deadline up to its next 1 ms tick, and the driver's wait is
/// rounded up again), and one that slept on tokio's blocking pool and handed the answer
/// back to a worker after 50.4 ms: a harness without any cost could not reach the floor
/// against it.
///
/// Without a latency nothing sleeps, and the mock of every earlier measurement serves:
/// axum on tokio's workers ([`pooled`]), which costs the runner less to wake than 64
/// threads (4 % less CPU a call at 10,000 calls). `RUN_THROUGHPUT_MOCK=pool` takes that
/// mock with a latency too, slept on tokio's blocking pool, as before 2026-12-02.
pub fn serve(latency: Duration) {
    if latency.is_zero() || std::env::var("RUN_THROUGHPUT_MOCK").is_ok_and(|m| m == "pool") {
        return pooled(latency);
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the mock");
    println!("http://{}", listener.local_addr().expect("mock address"));
    // A timer slack of 1 ns instead of 50 µs for the sleeps of this process's threads.
    // SAFETY: PR_SET_TIMERSLACK takes one integer and changes nothing but this thread's
    // (and, inherited, its later threads') timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        std::thread::spawn(move || serve_connection(stream, latency));
    }
}

/// Serves one connection's requests, one after another, on this thread.
fn serve_connection(stream: std::net::TcpStream, latency: Duration) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_nonblocking(true);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let Ok(stream) = tokio::net::TcpStream::from_std(stream) else {
            return;
        };
        let app = axum::Router::new().fallback(move || async move {
            // This thread serves no one else: blocking it is the precise wait.
            std::thread::sleep(latency);
            ([("content-type", "application/json")], ANSWER)
        });
        let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(
                hyper_util::rt::TokioIo::new(stream),
                hyper_util::service::TowerToHyperService::new(app),
            )
            .await;
    });
}

/// The earlier mock: axum on tokio's multi-thread runtime, each answer slept on the
/// blocking pool and handed back to a worker.
fn pooled(latency: Duration) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let app = axum::Router::new().fallback(move || async move {
            if !latency.is_zero() {
                let until = Instant::now() + latency;
                let _ = tokio::task::spawn_blocking(move || {
                    std::thread::sleep(until.saturating_duration_since(Instant::now()));
                })
                .await;
            }
            ([("content-type", "application/json")], ANSWER)
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the mock");
        println!("http://{}", listener.local_addr().expect("mock address"));
        axum::serve(listener, app).await.expect("serve the mock");
    });
}

/// The same answer from a wiremock mock in this process (request recording disabled):
/// what the simulations were built on before.
pub async fn wiremock(latency: Duration) -> wiremock::MockServer {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::builder()
        .disable_request_recording()
        .start()
        .await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_delay(latency)
                .set_body_raw(ANSWER, "application/json"),
        )
        .mount(&server)
        .await;
    server
}
