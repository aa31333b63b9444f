//! Stalled TLS handshakes against a listener that serves mutual TLS: a
//! thousand connections that open TCP and send nothing, from one address and
//! from many, and a new caller with a client certificate that must be served
//! while they are all still held open by their clients. Handshakes under way
//! are bounded per address (`--tls-handshakes-per-address-max`) and in all
//! (`--tls-handshakes-max`); past a bound the oldest under it is closed,
//! which the stalled clients see as their connection ending and
//! `stepwell_tls_handshakes_shed_total` counts. The handshake timeout is
//! set far beyond any run here, so only shedding closes a stalled handshake.

use std::io::{ErrorKind, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient;
use stepwell::config::sections::Tls;
use stepwell_test_support::WAIT_LIMIT;
use stepwell_test_support::admin::{Scrape, free_local_address};
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::channel::{Target, connect_from, try_connect_from};
use stepwell_test_support::requests::{T0, checkpoint};
use stepwell_test_support::sidecar::Sidecar;
use stepwell_test_support::tls::{Authority, ClientTls};

/// Stalled connections each test opens.
const STALLED: usize = 1000;

const SHED: &str = "stepwell_tls_handshakes_shed_total";

/// A sidecar serving mutual TLS with these handshake bounds, its admin
/// listener on, and the client side of its TLS for callers.
struct Served {
    /// Held so that the sidecar serves as long as the test needs it.
    _server: Sidecar,
    addr: SocketAddr,
    admin: String,
    client: ClientTls,
}

async fn serve(store: &TestStore, max: usize, per_address_max: usize) -> Served {
    let ca = Authority::new("stepwell test CA");
    let (cert, key) = ca.server().write(store.dir(), "server");
    let tls = Tls { cert, key, client_ca: Some(ca.write(&store.dir().join("client-ca.pem"))) };
    let client = ClientTls::new(&ca, Some(&ca.client("spiffe://example.org/caller", "caller.example.org")));
    let admin = free_local_address();
    let admin_listen = admin.parse().expect("an address");
    let server = Sidecar::builder()
        .store(store)
        .configure(move |c| {
            c.security.tls = Some(tls);
            c.connections.tls_handshakes.max = max;
            c.connections.tls_handshakes.per_address_max = per_address_max;
            c.connections.tls_handshakes.timeout = Duration::from_secs(600);
            c.observability.admin_listen = Some(admin_listen);
        })
        .client_tls(client.clone())
        .start()
        .await;
    let Target::Tcp(addr) = server.target().clone() else { panic!("a TCP sidecar") };
    Served { _server: server, addr, admin, client }
}

/// Connections that opened TCP and sent nothing, with the address each
/// came from; held open by this side until dropped.
struct Stalled(Vec<(IpAddr, std::net::TcpStream)>);

impl Stalled {
    /// Opens `per_source` connections to `addr` from each of `sources`, in turn.
    async fn open(addr: SocketAddr, sources: &[IpAddr], per_source: usize) -> Stalled {
        let mut streams = Vec::with_capacity(sources.len() * per_source);
        for &source in sources {
            for _ in 0..per_source {
                let stream = connect_from(addr, source).await.expect("a TCP connection");
                // A plain socket, read without waiting, so `closed` asks the kernel each time.
                let stream = stream.into_std().expect("a std socket");
                stream.set_nonblocking(true).expect("non-blocking");
                streams.push((source, stream));
            }
        }
        Stalled(streams)
    }

    /// How many of those from `source` (or from anywhere) the server has
    /// closed: their read ends or fails, where an open one would block.
    fn closed(&self, source: Option<IpAddr>) -> usize {
        let mut byte = [0u8; 1];
        let mut is_closed = |mut stream: &std::net::TcpStream| !matches!(stream.read(&mut byte), Err(error) if error.kind() == ErrorKind::WouldBlock);
        self.0.iter().filter(|(from, stream)| source.is_none_or(|source| *from == source) && is_closed(stream)).count()
    }

    /// Waits until the server has closed at least `count`, then answers how many it has.
    async fn closed_at_least(&self, count: usize) -> usize {
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            let closed = self.closed(None);
            if closed >= count || Instant::now() > deadline {
                return closed;
            }
            tokio::time::sleep(Duration::from_millis(20)).await; // polling the sockets, bounded above
        }
    }
}

/// A new caller with a client certificate, from `source`: it connects, its
/// handshake completes and a Checkpoint is stored. Prints how long it took.
async fn new_caller_is_served(served: &Served, source: IpAddr, beside: &str) {
    let started = Instant::now();
    let call = async {
        let (channel, _) = try_connect_from(served.addr, source, &served.client).await.expect("a TLS connection");
        let request = checkpoint("turn-new", "started", T0, "{}");
        CheckpointServiceClient::new(channel).checkpoint(request).await.expect("the checkpoint is stored")
    };
    let answer = tokio::time::timeout(WAIT_LIMIT, call).await.expect("the new caller is served");
    assert!(answer.into_inner().inserted);
    println!("a new mTLS caller was served in {:?} beside {STALLED} stalled handshakes {beside}", started.elapsed());
}

fn loopback(a: u8, b: u8, c: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, a, b, c))
}

#[tokio::test]
async fn stalled_handshakes_from_one_address_shed_their_own_oldest_and_a_new_caller_is_served() {
    let store = TestStore::new().await;
    let per_address_max = 8;
    let served = serve(&store, 256, per_address_max).await;
    let (crowd, neighbour) = (loopback(0, 0, 1), loopback(0, 0, 2));

    // A neighbour's few stalled handshakes, then a crowd's thousand from one address.
    let mut stalled = Stalled::open(served.addr, &[neighbour], 4).await;
    stalled.0.extend(Stalled::open(served.addr, &[crowd], STALLED).await.0);
    let expected = STALLED - per_address_max;
    assert_eq!(stalled.closed_at_least(expected).await, expected, "only the crowd's oldest are closed");
    assert_eq!(stalled.closed(Some(neighbour)), 0, "the crowd never closes the neighbour's handshakes");

    // The new caller shares the crowd's address: it closes the crowd's oldest.
    new_caller_is_served(&served, crowd, "from its own address").await;
    assert_eq!(stalled.closed(None), expected + 1, "the caller's one connection made room once");
    assert_eq!(stalled.closed(Some(neighbour)), 0);
    let scrape = Scrape::of(&served.admin).await;
    assert_eq!(scrape.value(SHED, &[("limit", "address")]), (expected + 1) as f64);
    assert_eq!(scrape.value(SHED, &[("limit", "total")]), 0.0);
    drop(stalled);
}

#[tokio::test]
async fn stalled_handshakes_from_many_addresses_shed_the_oldest_of_all_and_a_new_caller_is_served() {
    let store = TestStore::new().await;
    let max = 64;
    let served = serve(&store, max, 32).await;

    // 250 addresses, four stalled handshakes each: none reaches its own bound.
    let sources: Vec<IpAddr> = (1..=250).map(|host| loopback(0, 1, host)).collect();
    let stalled = Stalled::open(served.addr, &sources, STALLED / sources.len()).await;
    let expected = STALLED - max;
    assert_eq!(stalled.closed_at_least(expected).await, expected, "all but the newest {max} are closed");

    new_caller_is_served(&served, loopback(0, 0, 1), "from 250 other addresses").await;
    assert_eq!(stalled.closed(None), expected + 1, "the caller's one connection made room once");
    let scrape = Scrape::of(&served.admin).await;
    assert_eq!(scrape.value(SHED, &[("limit", "total")]), (expected + 1) as f64);
    assert_eq!(scrape.value(SHED, &[("limit", "address")]), 0.0);
    drop(stalled);
}
