//! A TCP proxy on loopback that can be taken down and brought back, to make a database
//! unreachable without touching the database server other tests share.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

pub struct Proxy {
    /// Where the proxy listens, the same across `down` and `up`.
    pub addr: SocketAddr,
    target: String,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Proxy {
    /// Forwards 127.0.0.1:PORT (a free port) to `target` (`host:port`).
    pub async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Proxy {
            addr: listener.local_addr().unwrap(),
            target: target.to_string(),
            tasks: Arc::new(Mutex::new(Vec::new())),
        };
        proxy.serve(listener);
        proxy
    }

    fn serve(&self, listener: TcpListener) {
        let (target, tasks) = (self.target.clone(), Arc::clone(&self.tasks));
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let pipe = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(pipe.abort_handle());
            }
        });
        self.tasks.lock().unwrap().push(accept.abort_handle());
    }

    /// Refuses new connections and cuts the open ones.
    pub async fn down(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
        // Let the aborted tasks drop their sockets.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    /// Listens again on the same port.
    pub async fn up(&self) {
        let listener = TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }

    /// `url` (`scheme://user@host:port/…`) pointed at the proxy instead.
    pub fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (user, rest) = rest.split_once('@').unwrap();
        let (_, path) = rest.split_once('/').unwrap();
        format!("{scheme}://{user}@{}/{path}", self.addr)
    }
}

/// `host:port` of `scheme://user@host:port/…`.
pub fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest).to_string()
}
