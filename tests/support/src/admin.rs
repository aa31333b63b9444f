//! The admin listener as a scraper and a browser meet it: a free loopback
//! address to serve it on, a plain HTTP/1.1 GET, any HTTP/1.1 request with
//! its headers (over TLS too), and a parsed `/metrics` scrape whose series a
//! test reads by name and labels.

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::{Mutex, OnceLock};

use prometheus_parse::{Sample, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A loopback address no one listens on now, for `--admin-listen`.
///
/// The port lies below the kernel's ephemeral range, where no outgoing
/// connection and no bind to port 0 lands: between this check and the
/// sidecar's own bind, the test's many client connections cannot take it.
/// Ports are handed out in turn from a point that differs per process, so
/// two test binaries running side by side seldom try the same one, and one
/// process never hands out the same port twice.
pub fn free_local_address() -> String {
    static NEXT: OnceLock<Mutex<u16>> = OnceLock::new();
    let (low, high) = (10_000u16, ephemeral_start().saturating_sub(1).max(10_001));
    let span = high - low;
    let next = NEXT.get_or_init(|| {
        let start = crate::rng::Rng::new(stepwell::domain::clock::system_now() as u64 ^ u64::from(std::process::id()))
            .below(usize::from(span));
        Mutex::new(start as u16)
    });
    let mut next = next.lock().expect("the port counter");
    for _ in 0..span {
        let port = low + *next;
        *next = (*next + 1) % span;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return format!("127.0.0.1:{port}");
        }
    }
    panic!("no free loopback port in {low}..{high}");
}

/// Where the kernel's ephemeral ports begin (Linux's
/// `ip_local_port_range`; 32768, its default, elsewhere).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// GETs `path` from the admin listener at `address`: its status code,
/// content type and body.
pub async fn get(address: &str, path: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(address).await.expect("connect to the admin listener");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send the request");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read the response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a response has a head and a body");
    let mut lines = head.lines();
    let status = lines.next().and_then(|line| line.split(' ').nth(1)).and_then(|code| code.parse().ok());
    let content_type = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        .map(|(_, value)| value.trim().to_owned())
        .unwrap_or_default();
    (status.expect("a status line"), content_type, body.to_owned())
}

/// An answer of the admin listener: its status, headers and body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    /// The first header of this name (case-insensitive), if any.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The `name=value` part of the Set-Cookie the answer carries.
    pub fn cookie(&self) -> Option<String> {
        self.header("set-cookie").and_then(|c| c.split(';').next()).map(str::to_owned)
    }
}

/// Sends one HTTP/1.1 request (`Connection: close`) over `stream`.
async fn exchange<S>(
    mut stream: S,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> HttpResponse
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.expect("send the request");
    let mut response = Vec::new();
    // A TLS peer that closes without close_notify still sent everything.
    let _ = stream.read_to_end(&mut response).await;
    let response = String::from_utf8(response).expect("a UTF-8 answer");
    let (head, body) = response.split_once("\r\n\r\n").expect("a response has a head and a body");
    let mut lines = head.lines();
    let status = lines.next().and_then(|line| line.split(' ').nth(1)).and_then(|code| code.parse().ok());
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned())).collect();
    HttpResponse { status: status.expect("a status line"), headers, body: body.to_owned() }
}

/// One HTTP/1.1 request to the admin listener at `address`.
pub async fn request(address: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> HttpResponse {
    let stream = TcpStream::connect(address).await.expect("connect to the admin listener");
    exchange(stream, address, method, path, headers, body).await
}

/// One HTTP/1.1 request over TLS to the admin listener at `address`,
/// trusting `tls`'s CA; the server is named `localhost`.
pub async fn request_tls(address: &str, tls: &crate::tls::ClientTls, path: &str) -> HttpResponse {
    let mut config = (*tls.config).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = TcpStream::connect(address).await.expect("connect to the admin listener");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a server name");
    let stream = connector.connect(name, tcp).await.expect("a TLS handshake with the admin listener");
    exchange(stream, address, "GET", path, &[], "").await
}

/// One `/metrics` scrape, parsed.
pub struct Scrape {
    pub text: String,
    samples: Vec<Sample>,
    /// Each family's `# TYPE`.
    pub types: HashMap<String, String>,
}

impl Scrape {
    /// Scrapes `/metrics` at `address`; fails unless it answers 200 in the
    /// Prometheus text format.
    pub async fn of(address: &str) -> Scrape {
        let (status, content_type, text) = get(address, "/metrics").await;
        assert_eq!(status, 200, "/metrics answers 200: {text}");
        assert!(content_type.starts_with("text/plain"), "the Prometheus text format: {content_type}");
        Scrape::parse(text)
    }

    pub fn parse(text: String) -> Scrape {
        let lines = text.lines().map(|line| Ok(line.to_owned()));
        let scrape = prometheus_parse::Scrape::parse(lines).expect("the scrape parses as the Prometheus text format");
        let types = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|line| line.split_once(' '))
            .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
            .collect();
        Scrape { text, samples: scrape.samples, types }
    }

    /// The samples of `name` whose labels include every one of `labels`.
    pub fn matching<'a>(&'a self, name: &'a str, labels: &'a [(&str, &str)]) -> impl Iterator<Item = &'a Sample> {
        self.samples.iter().filter(move |sample| {
            sample.metric == name && labels.iter().all(|(key, value)| sample.labels.get(key) == Some(*value))
        })
    }

    /// The value of the one counter or gauge `name` with `labels`; fails if
    /// there is none or more than one.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<f64> = self
            .matching(name, labels)
            .map(|sample| match sample.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
                _ => panic!("{name} is not a counter or a gauge"),
            })
            .collect();
        assert_eq!(found.len(), 1, "one series {name}{labels:?}, found {found:?} in\n{}", self.text);
        found[0]
    }

    /// The sample count of the histogram `name` with `labels`, summed over
    /// the series that match (0 if none does).
    pub fn count(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(name, labels)
            .map(|sample| match &sample.value {
                Value::Histogram(buckets) => buckets.iter().map(|b| b.count).fold(0.0, f64::max) as u64,
                _ => panic!("{name} is not a histogram"),
            })
            .sum()
    }

    /// The sum of the histogram `name` with `labels`, over the matching series.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let name_sum = format!("{name}_sum");
        self.samples
            .iter()
            .filter(|s| s.metric == name_sum && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                Value::Untyped(v) | Value::Counter(v) | Value::Gauge(v) => v,
                _ => 0.0,
            })
            .sum()
    }

    /// Every label name used by any sample.
    pub fn label_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.samples.iter().flat_map(|s| s.labels.keys().cloned()).collect();
        names.sort();
        names.dedup();
        names
    }
}
