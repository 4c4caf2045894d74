//! What one client can make the daemon hold, and the limits that bound it.
//!
//! Every endpoint (Unix socket or named pipe, the same server) gets the same limits:
//!
//! - **connections**: at most [`CONNECTIONS_PER_ENDPOINT`] on one endpoint and
//!   [`CONNECTIONS_TOTAL`] in all, fewer when the descriptor limit leaves less than
//!   [`DESCRIPTOR_RESERVE`] descriptors for the daemon's own work ([`connection_budget`]). A
//!   connection past the cap is closed at once (counted and logged);
//! - **streams**: at most [`STREAMS_PER_CONNECTION`] concurrent calls on one connection
//!   (`SETTINGS_MAX_CONCURRENT_STREAMS`; a client queues the others, grpc-go and tonic both do);
//! - **message size**: each group's largest legitimate request ([`max_request_bytes`]); more is
//!   RESOURCE_EXHAUSTED from the message's length prefix, before its bytes are buffered;
//! - **request bodies**: a request's message must arrive within [`BODY_TIMEOUT`], and at most
//!   [`RECEIVING_REQUESTS`] requests may be receiving their message at once in the whole daemon,
//!   [`RECEIVING_PER_CONNECTION`] of them on one connection ([`RequestLimits`]), so one
//!   connection's stalled senders leave places for everyone else's; all past the limit are
//!   RESOURCE_EXHAUSTED naming it. A request counts as receiving from [`RECEIVING_GRACE`] after
//!   its headers until its whole message has arrived;
//! - **idle connections**: a connection with no call in progress and none started for
//!   [`IDLE_TIMEOUT`] is told to go away (GOAWAY, NO_ERROR) and closes, as grpc-go's
//!   MaxConnectionIdle does; HTTP/2 keepalive pings every [`KEEPALIVE_INTERVAL`], a connection
//!   that does not answer one within [`KEEPALIVE_TIMEOUT`] is closed; every connection is told
//!   to go away after [`MAX_CONNECTION_AGE`] and closes once its calls end.
//!   This is grpc-go's own MaxConnectionIdle/MaxConnectionAge behaviour: its clients (upstream's,
//!   which keep one connection for their whole life, and the drivers') open a new connection for
//!   the next call without failing any; tonic clients reconnect too. grpc-go clients answer
//!   server pings at any rate (its ping enforcement is server-side only). The daemon enforces no
//!   minimum interval on the client's pings (grpc-go's servers answer a client pinging more
//!   often than every 5 min GOAWAY ENHANCE_YOUR_CALM): a connection is closed for silence,
//!   never for pinging.
//!
//! With these, the memory a client can pin is about `CONNECTIONS_TOTAL` idle connections (a few
//! tens of KiB each) plus `RECEIVING_REQUESTS` messages of at most [`MAX_REQUEST_BYTES`] each,
//! plus HTTP/2 receive windows: the limits table of docs/differences.md states the figures.

use crate::metrics::{Limit, refused};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Concurrent calls one connection may have open (`SETTINGS_MAX_CONCURRENT_STREAMS`).
pub const STREAMS_PER_CONNECTION: u32 = 64;
/// HTTP/2 receive window of one stream: a request message arrives in windows of this size.
pub const STREAM_WINDOW: u32 = 64 * 1024;
/// HTTP/2 receive window of one connection: what it may have sent and the daemon not yet read.
pub const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// How long a request's message may take to arrive, from its headers to its end.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests receiving their message at once, in the whole daemon. A legitimate message arrives
/// in microseconds, so only stalled senders ever meet this.
pub const RECEIVING_REQUESTS: usize = 128;
/// Requests receiving their message at once on one connection: an eighth of [`RECEIVING_REQUESTS`],
/// so a client needs eight connections of stalled senders to take every place, and with fewer (the
/// attack this answers used four) leaves half to the others.
pub const RECEIVING_PER_CONNECTION: usize = 16;
/// How long a request's message may be arriving before it takes a receiving place. Legitimate
/// messages arrive within microseconds of their headers; a burst of calls on one connection
/// finds many in flight at once, and must not be refused for it.
pub const RECEIVING_GRACE: Duration = Duration::from_millis(500);
/// A connection with no call in progress and none started for this long is asked to go away.
/// grpc-go's servers default to no idle limit and grpc-go's keepalive enforcement takes 5 min as
/// the shortest interval a client may be made to keep; 5 min of silence is the same bound. A
/// Go client keeping one connection for life (upstream's) reconnects on its next call.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Interval of the daemon's HTTP/2 keepalive pings on every connection.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
/// A connection whose peer does not acknowledge a ping within this is closed.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// After this, a connection is asked to go away (GOAWAY, NO_ERROR); its calls finish first.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(30 * 60);
/// Connections one endpoint holds at most.
pub const CONNECTIONS_PER_ENDPOINT: usize = 3072;
/// Connections the daemon holds at most, all endpoints together.
pub const CONNECTIONS_TOTAL: usize = 4096;
/// Descriptors kept for the daemon's own work (files, devices, mkfs and mount pipes, logs)
/// however many connections clients open.
pub const DESCRIPTOR_RESERVE: usize = 256;

/// UTF-8 bytes of the longest path a request can legitimately carry: 32,767 UTF-16 units
/// (Windows' extended-length limit), each at most 3 UTF-8 bytes. Linux paths are shorter.
const PATH_BYTES: usize = 32_767 * 3;
/// Room for a request's fields other than its paths (numbers, IDs, names, field keys).
const FIELDS_BYTES: usize = 16 * 1024;
/// The largest request any group accepts ([`max_request_bytes`] of SMB).
pub const MAX_REQUEST_BYTES: usize = 4 * PATH_BYTES + FIELDS_BYTES;

/// The largest request message `group` accepts: as many maximal paths as its largest request
/// carries, plus its other fields. Every request of upstream's API is a few names, paths and
/// numbers (upstream's clients and the drivers send KiB); none carries data.
///
/// - filesystem: two paths (CreateSymlink, the v1alpha1 Rmdir/Move forms);
/// - volume: a volume ID (a `\\?\Volume{..}\` path on Windows) and a target path (MountVolume);
/// - smb: remote path, local path, user name and password (NewSmbGlobalMapping), bounded by paths;
/// - disk, system, iscsi: IDs, numbers, an IQN (at most 223 bytes), a portal, CHAP secrets,
///   a service name: one path's room is far more than any of them holds.
pub fn max_request_bytes(group: &str) -> usize {
    let paths = match group {
        "filesystem" | "volume" => 2,
        "smb" => 4,
        _ => 1,
    };
    paths * PATH_BYTES + FIELDS_BYTES
}

/// How many connections the daemon may hold in all: [`CONNECTIONS_TOTAL`], or fewer when the
/// descriptor limit `fds` (None: no such limit, as for Windows pipes) leaves less than
/// [`DESCRIPTOR_RESERVE`] descriptors beside them.
pub fn connection_budget(fds: Option<u64>) -> usize {
    let total = CONNECTIONS_TOTAL as u64;
    match fds {
        Some(n) => n.saturating_sub(DESCRIPTOR_RESERVE as u64).clamp(1, total) as usize,
        None => CONNECTIONS_TOTAL,
    }
}

/// The soft descriptor limit of this process (the daemon raises it to the hard limit at start).
#[cfg(unix)]
pub fn descriptor_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Windows named pipes are handles, with no per-process limit like `RLIMIT_NOFILE`.
#[cfg(windows)]
pub fn descriptor_limit() -> Option<u64> {
    None
}

/// The connection caps one endpoint applies: its own and the daemon-wide one.
#[derive(Clone)]
pub struct ConnectionCaps {
    endpoint: Arc<Semaphore>,
    total: Arc<Semaphore>,
    per_endpoint: usize,
    in_all: usize,
}

impl ConnectionCaps {
    /// The daemon-wide cap shared by every endpoint: `in_all` connections.
    pub fn daemon(in_all: usize) -> Arc<Semaphore> {
        Arc::new(Semaphore::new(in_all))
    }

    /// One endpoint's caps: `per_endpoint` of its own, and a share of `total` (of `in_all`).
    pub fn new(per_endpoint: usize, total: Arc<Semaphore>, in_all: usize) -> Self {
        ConnectionCaps {
            endpoint: Arc::new(Semaphore::new(per_endpoint)),
            total,
            per_endpoint,
            in_all,
        }
    }

    /// Takes a place for one new connection, or says which cap is reached.
    pub fn admit(&self) -> Result<ConnectionPlace, String> {
        let Ok(own) = self.endpoint.clone().try_acquire_owned() else {
            refused(Limit::ConnectionsPerEndpoint);
            return Err(format!(
                "the endpoint holds its limit of {} connections",
                self.per_endpoint
            ));
        };
        let Ok(all) = self.total.clone().try_acquire_owned() else {
            refused(Limit::ConnectionsTotal);
            return Err(format!(
                "the daemon holds its limit of {} connections in all",
                self.in_all
            ));
        };
        Ok(ConnectionPlace {
            _own: own,
            _all: all,
        })
    }
}

/// A connection's place under its caps; given back when the connection is dropped.
#[derive(Debug)]
pub struct ConnectionPlace {
    _own: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
}

static RECEIVING: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(RECEIVING_REQUESTS)));

/// What one connection holds under the daemon's limits: its share of the receiving places
/// ([`RECEIVING_PER_CONNECTION`]) and its calls in progress, which tell when it is idle.
#[derive(Debug)]
pub struct Connection {
    receiving: Arc<Semaphore>,
    calls: AtomicUsize,
    /// When a call last started or ended.
    last_activity: Mutex<Instant>,
}

impl Connection {
    /// A new connection's state: no call yet, its whole share free.
    pub fn new() -> Arc<Self> {
        Arc::new(Connection {
            receiving: Arc::new(Semaphore::new(RECEIVING_PER_CONNECTION)),
            calls: AtomicUsize::new(0),
            last_activity: Mutex::new(Instant::now()),
        })
    }

    /// Completes once the connection has had no call in progress, and none started, for
    /// `after` ([`IDLE_TIMEOUT`] when served).
    ///
    /// It looks at the calls when its timer fires instead of being woken by them: a wake-up
    /// from a call's task would put the connection's task in that worker's LIFO slot, where no
    /// other worker can take it, and a metadata call running inline and hanging there would
    /// then stall the whole connection.
    pub async fn idle_for(&self, after: Duration) {
        loop {
            let now = Instant::now();
            let next = if self.calls.load(Ordering::Acquire) > 0 {
                now + after
            } else {
                *self.last_activity.lock().unwrap_or_else(|p| p.into_inner()) + after
            };
            if next <= now {
                return;
            }
            tokio::time::sleep_until(next).await;
        }
    }

    /// Counts one call in progress until the guard is dropped.
    fn start_call(self: &Arc<Self>) -> CallInProgress {
        self.calls.fetch_add(1, Ordering::AcqRel);
        self.touch();
        CallInProgress(self.clone())
    }

    fn touch(&self) {
        *self.last_activity.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }
}

/// A call counted in its connection's [`Connection`] until dropped.
struct CallInProgress(Arc<Connection>);

impl Drop for CallInProgress {
    fn drop(&mut self) {
        // The time first, so a look between the two never finds no call and an old time.
        self.0.touch();
        self.0.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The tower layer adding [`Limited`] to the service of one connection.
#[derive(Debug, Clone)]
pub struct RequestLimits(pub Arc<Connection>);

impl<S> tower::Layer<S> for RequestLimits {
    type Service = Limited<S>;
    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            connection: self.0.clone(),
        }
    }
}

/// Bounds how long a request's message may take to arrive ([`BODY_TIMEOUT`]) and how many
/// requests may be receiving one at once ([`RECEIVING_REQUESTS`], [`RECEIVING_PER_CONNECTION`]),
/// and counts the connection's calls in progress. hyper has none of these knobs: it keeps a
/// stream whose sender stalls for as long as the connection lives.
#[derive(Debug, Clone)]
pub struct Limited<S> {
    inner: S,
    connection: Arc<Connection>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> tower::Service<http::Request<tonic::body::Body>> for Limited<S>
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
        >,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let call = self.connection.start_call();
        let path = req.uri().path().to_owned();
        let req = req.map(|body| {
            tonic::body::Body::new(Arriving {
                inner: body,
                timer: Box::pin(tokio::time::sleep(RECEIVING_GRACE)),
                connection: self.connection.clone(),
                permits: None,
                done: false,
                message: Message::default(),
                path,
            })
        });
        let fut = self.inner.call(req);
        Box::pin(async move {
            let r = fut.await;
            drop(call);
            r
        })
    }
}

/// A request body that must end within [`BODY_TIMEOUT`], holding its places (its connection's
/// and the daemon's) until it ends, fails, or is dropped.
struct Arriving {
    inner: tonic::body::Body,
    timer: Pin<Box<Sleep>>,
    connection: Arc<Connection>,
    /// Taken when the message is still arriving [`RECEIVING_GRACE`] after the headers (a burst
    /// of calls whose messages are in flight is never refused), given back when it has arrived.
    permits: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
    /// The message has arrived or the body ended: no timer or place applies any more.
    done: bool,
    message: Message,
    path: String,
}

/// How much of a request's (first) gRPC message has arrived. Every RPC of the API is unary, and
/// tonic stops reading a unary request once it has its message: the frame ending the stream may
/// never be polled, so the message's own length, not the body's end, says when it has arrived.
/// Without this, a call kept its receiving place for as long as it ran (a call waiting for a
/// held disk too), and 16 such calls took their connection's share.
#[derive(Default)]
struct Message {
    /// The 5-byte prefix (compression flag, big-endian length) as far as it has arrived.
    prefix: Vec<u8>,
    /// Bytes after the prefix.
    body: usize,
}

impl Message {
    /// Counts `data`; true once the whole message has arrived.
    fn arrived(&mut self, data: &[u8]) -> bool {
        let take = (5 - self.prefix.len()).min(data.len());
        self.prefix.extend_from_slice(&data[..take]);
        self.body += data.len() - take;
        match self.prefix[..] {
            [_, a, b, c, d] => self.body >= u32::from_be_bytes([a, b, c, d]) as usize,
            _ => false,
        }
    }
}

impl Arriving {
    /// No timer or place applies any more; the places are given back.
    fn end(&mut self) {
        self.done = true;
        self.permits = None;
    }

    /// Ends the body with RESOURCE_EXHAUSTED naming `limit`'s `why`, counted. hyper resets the
    /// stream when the answer is sent, and drops what it buffered for it.
    fn refuse(
        &mut self,
        limit: Limit,
        why: &str,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, tonic::Status>>> {
        self.end();
        refused(limit);
        self.inner = tonic::body::Body::empty();
        Poll::Ready(Some(Err(tonic::Status::resource_exhausted(format!(
            "{}: {why}; retry",
            self.path
        )))))
    }
}

impl HttpBody for Arriving {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if this.done {
            return polled;
        }
        match polled {
            Poll::Ready(r) => {
                let arrived = match &r {
                    Some(Ok(f)) => f.data_ref().is_some_and(|d| this.message.arrived(d)),
                    _ => false,
                };
                if arrived || r.as_ref().is_none_or(Result::is_err) || this.inner.is_end_stream() {
                    this.end();
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                if this.permits.is_none() && this.timer.as_mut().poll(cx).is_ready() {
                    // Still arriving after the grace: a place, or the refusal. The timer now
                    // runs to the body's deadline.
                    let Ok(own) = this.connection.receiving.clone().try_acquire_owned() else {
                        let why = format!(
                            "{RECEIVING_PER_CONNECTION} requests of this connection are already \
                             receiving their message, the daemon's limit per connection"
                        );
                        return this.refuse(Limit::ReceivingPerConnection, &why);
                    };
                    let Ok(all) = RECEIVING.clone().try_acquire_owned() else {
                        let why = format!(
                            "{RECEIVING_REQUESTS} requests are already receiving their message, \
                             the daemon's limit"
                        );
                        return this.refuse(Limit::ReceivingRequests, &why);
                    };
                    this.permits = Some((own, all));
                    let deadline = this.timer.deadline() - RECEIVING_GRACE + BODY_TIMEOUT;
                    this.timer.as_mut().reset(deadline);
                }
                if this.timer.as_mut().poll(cx).is_ready() {
                    let why = format!(
                        "the request message did not arrive within {} s, the daemon's limit",
                        BODY_TIMEOUT.as_secs()
                    );
                    tracing::debug!(path = %this.path, "request message did not arrive in time");
                    return this.refuse(Limit::BodyTimeout, &why);
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_accepts_its_longest_legitimate_request_and_no_more_than_the_largest() {
        for g in csi_proxy_api::GROUPS {
            let n = max_request_bytes(g);
            // A maximal Windows path, encoded as 3-byte characters, always fits.
            assert!(n >= PATH_BYTES + FIELDS_BYTES, "{g}: {n}");
            assert!(n <= MAX_REQUEST_BYTES, "{g}: {n}");
        }
        assert_eq!(max_request_bytes("smb"), MAX_REQUEST_BYTES);
        // Far below tonic's default of 4 MiB, which the daemon accepted before.
        const { assert!(MAX_REQUEST_BYTES < 1 << 20) };
    }

    #[test]
    fn the_connection_budget_keeps_descriptors_in_reserve() {
        assert_eq!(connection_budget(None), CONNECTIONS_TOTAL);
        assert_eq!(connection_budget(Some(1_048_576)), CONNECTIONS_TOTAL);
        assert_eq!(connection_budget(Some(1024)), 1024 - DESCRIPTOR_RESERVE);
        assert_eq!(connection_budget(Some(100)), 1);
    }

    #[tokio::test]
    async fn caps_refuse_past_the_limit_and_give_places_back() {
        let total = ConnectionCaps::daemon(3);
        let a = ConnectionCaps::new(2, total.clone(), 3);
        let b = ConnectionCaps::new(2, total, 3);
        let a1 = a.admit().unwrap();
        let _a2 = a.admit().unwrap();
        assert!(a.admit().unwrap_err().contains("limit of 2 connections"));
        let _b1 = b.admit().unwrap();
        assert!(
            b.admit()
                .unwrap_err()
                .contains("limit of 3 connections in all")
        );
        drop(a1);
        b.admit()
            .expect("a closed connection's place is free again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_arriving_ends_with_resource_exhausted() {
        use http_body_util::BodyExt;
        use tokio_stream::StreamExt;
        // Part of a message, then nothing more.
        let part =
            Ok::<_, tonic::Status>(Frame::data(bytes::Bytes::from_static(b"\0\0\0\0\x10part")));
        let stalled = tokio_stream::iter([part]).chain(tokio_stream::pending());
        let body = tonic::body::Body::new(http_body_util::StreamBody::new(stalled));
        let permits = RECEIVING.available_permits();
        let conn = Connection::new();
        let mut b = arriving(&conn, body, "/v1.Filesystem/Mkdir");
        assert!(b.frame().await.unwrap().is_ok());
        let e = b.frame().await.unwrap().unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(
            e.message().contains("Mkdir") && e.message().contains("10 s"),
            "{e}"
        );
        assert_eq!(
            RECEIVING.available_permits(),
            permits,
            "the place is given back"
        );
        assert_eq!(
            conn.receiving.available_permits(),
            RECEIVING_PER_CONNECTION,
            "and the connection's"
        );
    }

    /// What [`Limited`] makes of a request's `body` on `conn`.
    fn arriving(conn: &Arc<Connection>, body: tonic::body::Body, path: &str) -> Arriving {
        Arriving {
            inner: body,
            timer: Box::pin(tokio::time::sleep(RECEIVING_GRACE)),
            connection: conn.clone(),
            permits: None,
            done: false,
            message: Message::default(),
            path: path.into(),
        }
    }

    /// Polls `b` once, as hyper's task would, without waiting.
    fn poll_once(b: &mut Arriving) -> Poll<Option<Result<Frame<bytes::Bytes>, tonic::Status>>> {
        Pin::new(b).poll_frame(&mut Context::from_waker(std::task::Waker::noop()))
    }

    /// A body whose frames are sent through the returned sender.
    fn channel_body() -> (
        tokio::sync::mpsc::UnboundedSender<Result<Frame<bytes::Bytes>, tonic::Status>>,
        tonic::body::Body,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        (
            tx,
            tonic::body::Body::new(http_body_util::StreamBody::new(stream)),
        )
    }

    /// A request takes a receiving place only while its message is found still arriving, and
    /// gives it back once the whole message has arrived although the frame ending its stream
    /// was not read (tonic never reads it for a unary call): a call running long (waiting for
    /// a held disk) holds no place. Before, it held one from its headers until it ended, and a
    /// burst of 17 calls on one connection was refused.
    #[tokio::test(start_paused = true)]
    async fn a_place_is_held_only_while_the_message_is_arriving() {
        let conn = Connection::new();
        let (tx, body) = channel_body();
        let mut b = arriving(&conn, body, "/v1.Volume/ListVolumesOnDisk");
        let data = |d: &'static [u8]| Ok(Frame::data(bytes::Bytes::from_static(d)));
        tx.send(data(b"\0\0\0\0\x06ab")).unwrap();
        assert!(matches!(poll_once(&mut b), Poll::Ready(Some(Ok(_)))));
        assert_eq!(conn.receiving.available_permits(), RECEIVING_PER_CONNECTION);
        assert!(poll_once(&mut b).is_pending());
        tokio::time::advance(RECEIVING_GRACE).await;
        assert!(poll_once(&mut b).is_pending());
        assert_eq!(
            conn.receiving.available_permits(),
            RECEIVING_PER_CONNECTION - 1,
            "half a message is still arriving"
        );
        tx.send(data(b"cdef")).unwrap();
        assert!(matches!(poll_once(&mut b), Poll::Ready(Some(Ok(_)))));
        assert_eq!(
            conn.receiving.available_permits(),
            RECEIVING_PER_CONNECTION,
            "the whole message arrived"
        );
        // The stream's end never read, as tonic does: nothing is held, no timer applies.
        assert!(poll_once(&mut b).is_pending());
        assert_eq!(conn.receiving.available_permits(), RECEIVING_PER_CONNECTION);
        drop(tx);
    }

    /// One connection's stalled senders take at most its share of the receiving places; the
    /// next request on it is RESOURCE_EXHAUSTED naming the limit, while a request on another
    /// connection is still taken in. Before, one connection could take every place.
    #[tokio::test(start_paused = true)]
    async fn a_connection_takes_at_most_its_share_of_the_receiving_places() {
        let (a, b) = (Connection::new(), Connection::new());
        let stalled = |conn| {
            let (tx, body) = channel_body();
            (tx, arriving(conn, body, "/v1.Filesystem/Mkdir"))
        };
        let refused_before = crate::metrics::refusals(Limit::ReceivingPerConnection);
        let mut kept: Vec<_> = (0..RECEIVING_PER_CONNECTION).map(|_| stalled(&a)).collect();
        let mut over = stalled(&a);
        let mut on_b = stalled(&b);
        for s in kept.iter_mut().chain([&mut over, &mut on_b]) {
            assert!(
                poll_once(&mut s.1).is_pending(),
                "in flight: no place needed"
            );
        }
        assert_eq!(a.receiving.available_permits(), RECEIVING_PER_CONNECTION);
        tokio::time::advance(RECEIVING_GRACE).await;
        for s in &mut kept {
            assert!(poll_once(&mut s.1).is_pending());
        }
        let Poll::Ready(Some(Err(status))) = poll_once(&mut over.1) else {
            panic!("the 17th is refused");
        };
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(
            status.message().contains("16 requests of this connection"),
            "{status:?}"
        );
        assert_eq!(
            crate::metrics::refusals(Limit::ReceivingPerConnection),
            refused_before + 1
        );
        assert!(poll_once(&mut on_b.1).is_pending(), "another connection's");
        assert_eq!(
            b.receiving.available_permits(),
            RECEIVING_PER_CONNECTION - 1
        );
        // Bodies given up give the places back.
        kept.clear();
        assert_eq!(a.receiving.available_permits(), RECEIVING_PER_CONNECTION);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_after_the_timeout_without_calls() {
        let c = Connection::new();
        let after = Duration::from_secs(300);
        let t0 = tokio::time::Instant::now();
        let call = c.start_call();
        let idle = tokio::spawn({
            let c = c.clone();
            async move { c.idle_for(after).await }
        });
        tokio::time::sleep(after * 2).await;
        assert!(!idle.is_finished(), "a call in progress is not idleness");
        drop(call);
        tokio::time::sleep(after / 2).await;
        // A call that starts and ends restarts the count.
        drop(c.start_call());
        idle.await.unwrap();
        assert_eq!(t0.elapsed(), after * 2 + after / 2 + after);
    }
}
