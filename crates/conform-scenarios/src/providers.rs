//! The mock providers, one server per provider name, all reading the same `Board`:
//!
//! - `primary`, `fallback`, `rogue`: wiremock servers speaking OpenAI Chat Completions;
//!   the allowlist permits failover to `fallback` and never to `rogue`;
//! - `faulty`: the fault server, for what wiremock cannot do (a reset after the request
//!   was read, a body cut mid-way);
//! - `dead`: a port that is bound but never listens, so connecting is refused.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinHandle;
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use super::mock::{Board, Reply, http_answer};

/// The provider jobs are created on.
pub const PRIMARY: &str = "primary";
/// The failover target the scenarios' allowlist permits.
pub const FALLBACK: &str = "fallback";
/// A failover target the allowlist never permits.
pub const ROGUE: &str = "rogue";
/// The fault server: resets and bodies cut mid-way.
pub const FAULTY: &str = "faulty";
/// Bound but never listening: connecting is refused.
pub const DEAD: &str = "dead";

/// Every provider name the orchestrator must be configured with.
pub const NAMES: [&str; 5] = [PRIMARY, FALLBACK, ROGUE, FAULTY, DEAD];

/// Why the mock providers could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// A provider's port could not be bound (another process holds it, say).
    #[error("cannot listen on 127.0.0.1:{port} for provider `{provider}`: {source}")]
    Bind {
        /// The provider, by name.
        provider: String,
        /// The port asked for (0: any free one).
        port: u16,
        /// What the operating system answered.
        #[source]
        source: std::io::Error,
    },
    /// `--mock-ports` names a provider that is not one of [`NAMES`].
    #[error("--mock-ports names `{0}`, which is not a mock provider (expected {names})", names = NAMES.join(", "))]
    UnknownName(String),
}

/// Held, never read: dropping a server stops it (and frees a dead port).
#[allow(dead_code)]
enum Server {
    Mock(MockServer),
    Fault(FaultServer),
    Dead(TcpSocket),
}

/// The running mock providers.
pub struct Providers {
    board: Board,
    urls: Vec<(String, String)>,
    _servers: Vec<Server>,
}

impl Providers {
    /// Starts every provider on loopback: on the port `ports` names for it, else on a
    /// free one.
    pub async fn start(ports: &BTreeMap<String, u16>) -> Result<Providers, ProviderError> {
        if let Some(unknown) = ports.keys().find(|k| !NAMES.contains(&k.as_str())) {
            return Err(ProviderError::UnknownName(unknown.clone()));
        }
        let board = Board::default();
        let mut urls = Vec::new();
        let mut servers = Vec::new();
        for name in NAMES {
            let port = ports.get(name).copied().unwrap_or(0);
            let bind_error = |source| ProviderError::Bind {
                provider: name.to_string(),
                port,
                source,
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let (server, addr) = match name {
                FAULTY => {
                    let fault = FaultServer::start(addr, name, board.clone())
                        .await
                        .map_err(bind_error)?;
                    let addr = fault.addr;
                    (Server::Fault(fault), addr)
                }
                DEAD => {
                    let socket = TcpSocket::new_v4().map_err(bind_error)?;
                    socket.bind(addr).map_err(bind_error)?;
                    let addr = socket.local_addr().map_err(bind_error)?;
                    (Server::Dead(socket), addr)
                }
                _ => {
                    let listener = std::net::TcpListener::bind(addr).map_err(bind_error)?;
                    let server = MockServer::builder()
                        .listener(listener)
                        .disable_request_recording()
                        .start()
                        .await;
                    Mock::given(any())
                        .respond_with(Responder {
                            provider: name.to_string(),
                            board: board.clone(),
                        })
                        .mount(&server)
                        .await;
                    let addr = *server.address();
                    (Server::Mock(server), addr)
                }
            };
            urls.push((name.to_string(), format!("http://{addr}")));
            servers.push(server);
        }
        Ok(Providers {
            board,
            urls,
            _servers: servers,
        })
    }

    /// What every provider received and is scripted to answer.
    pub fn board(&self) -> &Board {
        &self.board
    }

    /// `(name, base URL)` of every provider.
    pub fn urls(&self) -> &[(String, String)] {
        &self.urls
    }

    /// The value of `CONFORM_PROVIDERS`: `primary=http://127.0.0.1:P,…`.
    pub fn env_value(&self) -> String {
        self.urls
            .iter()
            .map(|(name, url)| format!("{name}={url}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

struct Responder {
    provider: String,
    board: Board,
}

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let arrival = self.board.arrive(
            &self.provider,
            request.method.as_str(),
            request.url.path(),
            &request.body,
        );
        let (status, headers, body) = http_answer(&self.provider, &arrival);
        let mut template = ResponseTemplate::new(status)
            .set_body_raw(body, "application/json")
            .set_delay(arrival.answer.when.delay());
        for (name, value) in headers {
            if name != "content-type" {
                template = template.insert_header(name.as_str(), value.as_str());
            }
        }
        template
    }
}

/// A tiny HTTP/1.1 server that can misbehave at the transport level. It is hand-rolled
/// on a TCP listener rather than built on axum, because an axum handler has no way to
/// reset its connection after reading the request.
struct FaultServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultServer {
    async fn start(addr: SocketAddr, name: &str, board: Board) -> std::io::Result<FaultServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let name = name.to_string();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (name, board) = (name.clone(), board.clone());
                tokio::spawn(async move {
                    // A client that goes away mid-exchange is none of the scenario's business.
                    let _ = serve_one(stream, &name, &board).await;
                });
            }
        });
        Ok(FaultServer { addr, task })
    }
}

/// Reads one request, then answers it the way the board says, and closes.
async fn serve_one(mut stream: TcpStream, name: &str, board: &Board) -> std::io::Result<()> {
    let Some((method, path, body)) = read_request(&mut stream).await? else {
        return Ok(());
    };
    let arrival = board.arrive(name, &method, &path, &body);
    tokio::time::sleep(arrival.answer.when.delay()).await;
    let (status, headers, body) = http_answer(name, &arrival);
    let head = |length: usize| {
        let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
        for (k, v) in &headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!(
            "content-length: {length}\r\nconnection: close\r\n\r\n"
        ));
        head.into_bytes()
    };
    match arrival.answer.reply {
        Reply::Reset => {
            // Zero linger turns the close into a RST: the client sees a reset, not an end.
            stream.set_zero_linger()?;
            drop(stream);
        }
        Reply::Truncated => {
            stream.write_all(&head(body.len())).await?;
            stream.write_all(&body[..body.len() / 2]).await?;
            stream.flush().await?;
            stream.shutdown().await?;
        }
        _ => {
            stream.write_all(&head(body.len())).await?;
            stream.write_all(&body).await?;
            stream.flush().await?;
            stream.shutdown().await?;
        }
    }
    Ok(())
}

/// The method, path and body of one HTTP/1.1 request (`Content-Length` or chunked).
async fn read_request(
    stream: &mut TcpStream,
) -> std::io::Result<Option<(String, String, Vec<u8>)>> {
    const LIMIT: usize = 8 << 20;
    let mut buf = Vec::with_capacity(4096);
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > LIMIT || read_more(stream, &mut buf).await? == 0 {
            return Ok(None);
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_string();
    let path = request_line.next().unwrap_or_default().to_string();
    let mut length = None;
    let mut chunked = false;
    let mut expect_continue = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        match name.as_str() {
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            "expect" => expect_continue = value.eq_ignore_ascii_case("100-continue"),
            _ => {}
        }
    }
    if expect_continue {
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
    }
    let mut body = buf.split_off(head_end);
    if chunked {
        while !body.ends_with(b"0\r\n\r\n") {
            if body.len() > LIMIT || read_more(stream, &mut body).await? == 0 {
                return Ok(None);
            }
        }
        body = dechunk(&body);
    } else {
        let length = length.unwrap_or(0).min(LIMIT);
        while body.len() < length {
            if read_more(stream, &mut body).await? == 0 {
                return Ok(None);
            }
        }
        body.truncate(length);
    }
    Ok(Some((method, path, body)))
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut chunk = [0u8; 8192];
    let n = stream.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

pub(super) fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = raw.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[..i]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let Ok(size) = usize::from_str_radix(size_text, 16) else {
            break;
        };
        raw = &raw[i + 2..];
        if size == 0 || raw.len() < size {
            break;
        }
        out.extend_from_slice(&raw[..size]);
        raw = raw.get(size + 2..).unwrap_or_default();
    }
    out
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::super::mock::Step;
    use super::*;

    async fn providers() -> Providers {
        Providers::start(&BTreeMap::new()).await.unwrap()
    }

    fn url(p: &Providers, name: &str) -> String {
        let base = &p.urls().iter().find(|(n, _)| n == name).unwrap().1;
        format!("{base}/v1/chat/completions")
    }

    fn client() -> reqwest::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    #[tokio::test]
    async fn wiremock_providers_follow_the_script_and_count() {
        let p = providers().await;
        p.board().script(
            PRIMARY,
            "ctagw1",
            vec![Step::now(Reply::Result {
                content: r#"{"ok":true}"#.into(),
            })],
        );
        let body = serde_json::json!({"messages": [{"role": "user", "content": "x ctagw1"}]});
        let answer: serde_json::Value = client()
            .post(url(&p, PRIMARY))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["choices"][0]["message"]["content"], r#"{"ok":true}"#);
        assert_eq!(p.board().count(PRIMARY, "ctagw1"), 1);
        assert_eq!(p.board().arrivals(PRIMARY, "ctagw1")[0].body, body);
    }

    #[tokio::test]
    async fn the_fault_server_resets_and_truncates() {
        let p = providers().await;
        p.board().script(
            FAULTY,
            "ctagf1",
            vec![Step::now(Reply::Reset), Step::now(Reply::Truncated)],
        );
        let send = || {
            client()
                .post(url(&p, FAULTY))
                .json(&serde_json::json!({"c": "ctagf1"}))
                .send()
        };
        let reset = send().await.unwrap_err();
        assert!(
            !reset.is_connect(),
            "the request was sent, then reset: {reset:?}"
        );
        let truncated = send().await.unwrap();
        assert_eq!(truncated.status(), 200);
        assert!(truncated.bytes().await.is_err(), "the body must be cut off");
        assert_eq!(p.board().count(FAULTY, "ctagf1"), 2);
    }

    #[tokio::test]
    async fn the_dead_provider_refuses_connections() {
        let p = providers().await;
        let err = client().post(url(&p, DEAD)).send().await.unwrap_err();
        assert!(err.is_connect(), "{err:?}");
    }

    #[tokio::test]
    async fn fixed_ports_are_honoured_and_unknown_names_refused() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        let p = Providers::start(&BTreeMap::from([(FALLBACK.to_string(), port)]))
            .await
            .unwrap();
        assert!(
            p.env_value()
                .contains(&format!("fallback=http://127.0.0.1:{port}"))
        );
        let err = Providers::start(&BTreeMap::from([("nobody".to_string(), 1)]))
            .await
            .err()
            .unwrap();
        assert!(err.to_string().contains("nobody"));
    }
}
