//! Where tonic's answers differ from the gRPC spec, one layer in front of every endpoint sets
//! them right.
//!
//! **Deadlines.** tonic enforces `grpc-timeout` itself but answers `CANCELLED` ("Timeout
//! expired"), and its timer sits outside every layer a server can add. This layer answers
//! `DEADLINE_EXCEEDED` a little earlier ([`margin`]), the code the spec prescribes (grpc-go and
//! C++ servers answer it too), before a tonic client's own timer would report `CANCELLED`.
//! The handler's future is dropped; host work already handed to a blocking thread runs to its
//! end (tokio never aborts a started `spawn_blocking` task), so the host is left in a state a
//! retry of the same idempotent request completes. Per-disk locks make that retry wait for the
//! background work instead of racing it.
//!
//! **Malformed requests** ([`tonic_answers_per_spec`]): a message over the receive limit is
//! `RESOURCE_EXHAUSTED` (tonic says `OUT_OF_RANGE`), a unary call without a message is
//! `UNIMPLEMENTED` (tonic says `INTERNAL`), as the spec's status-code table has them; messages
//! name the call.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// How much earlier than tonic's own timeout this layer answers a deadline of `t`: early
/// enough that the answer reaches the client before the client's own timer fires, even on a
/// loaded node, yet a small part of the deadline.
/// Never more than half the deadline, so a short deadline still gives the work a chance.
pub fn margin(t: Duration) -> Duration {
    (t / 10)
        .clamp(Duration::from_millis(5), Duration::from_millis(100))
        .min(t / 2)
}

/// When the daemon answers a request DEADLINE_EXCEEDED: its arrival plus its `grpc-timeout`
/// less [`margin`]. Put in the request's extensions for the handler ([`crate::call::deadline_of`]).
#[derive(Debug, Clone, Copy)]
pub struct CallDeadline(pub std::time::Instant);

/// The tower layer adding [`Deadline`] to an endpoint's service.
#[derive(Debug, Clone, Copy)]
pub struct Layer;

impl<S> tower::Layer<S> for Layer {
    type Service = Deadline<S>;
    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline(inner)
    }
}

/// Answers `DEADLINE_EXCEEDED` when the request's `grpc-timeout` (less [`margin`]) passes, and
/// `RESOURCE_EXHAUSTED` for a request message over the receive limit.
#[derive(Debug, Clone)]
pub struct Deadline<S>(S);

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for Deadline<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let timeout = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| parse_grpc_timeout(v.as_bytes()));
        let answer_in = timeout.map(|t| t.saturating_sub(margin(t)));
        // The handler's host work learns the same moment (call::deadline_of), measured from the
        // request's arrival, without parsing the header again.
        if let Some(d) = answer_in.and_then(|a| std::time::Instant::now().checked_add(a)) {
            req.extensions_mut().insert(CallDeadline(d));
        }
        let path = req.uri().path().to_owned();
        let fut = self.0.call(req);
        Box::pin(async move {
            let (Some(t), Some(answer_in)) = (timeout, answer_in) else {
                return fut.await.map(|r| tonic_answers_per_spec(&path, r));
            };
            let mut fut = Box::pin(fut);
            match tokio::time::timeout(answer_in, &mut fut).await {
                Ok(r) => r.map(|r| tonic_answers_per_spec(&path, r)),
                Err(_) => {
                    tracing::debug!(%path, ?t, "client deadline passed");
                    // Dropping the handler's future here ends its request in the metrics;
                    // say why, so it is counted as DEADLINE_EXCEEDED, not CANCELLED.
                    crate::metrics::ending_for_deadline(|| drop(fut));
                    Ok(tonic::Status::deadline_exceeded(format!(
                        "{path}: the client's deadline of {t:?} passed before the \
                         operation finished; work already started completes in the \
                         background, so a retry can finish it"
                    ))
                    .into_http())
                }
            }
        })
    }
}

/// What tonic's decoder says (codec/decode.rs) when a request message is over the limit.
const TONIC_OVER_LIMIT: &str = "Error, decoded message length too large: found ";
/// What tonic says (server/grpc.rs) when a unary call's body holds no message at all.
const TONIC_NO_MESSAGE: &str = "Missing request message.";
/// How prost's decode errors start (tonic-prost passes them on as INTERNAL).
const PROST_DECODE: &str = "failed to decode Protobuf message: ";

/// Rewrites tonic's answers to malformed requests the way the gRPC spec's status-code table
/// has them, with messages that name the call. tonic gives these answers before a handler runs,
/// as trailers-only responses (status in the headers), so the headers are all there is to change.
///
/// - a message over the receive limit: `RESOURCE_EXHAUSTED` (tonic: `OUT_OF_RANGE`);
/// - no request message in a unary call ("request cardinality violation"): `UNIMPLEMENTED`
///   (tonic: `INTERNAL`);
/// - bytes that are not the request type's protobuf: `INTERNAL` as the spec has it, now saying
///   which call.
fn tonic_answers_per_spec(
    path: &str,
    mut resp: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    let code = resp.headers().get("grpc-status").map(|v| v.as_bytes());
    if !matches!(code, Some(b"11" | b"13")) {
        return resp;
    }
    let Some(status) = tonic::Status::from_header_map(resp.headers()) else {
        return resp;
    };
    let m = status.message();
    let fixed = if let Some(found) = m.strip_prefix(TONIC_OVER_LIMIT) {
        // "5242885 bytes, the limit is: 4194304 bytes"
        let mut numbers = found
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty());
        let (Some(size), Some(limit)) = (numbers.next(), numbers.next()) else {
            return resp;
        };
        crate::metrics::refused(crate::metrics::Limit::MessageSize);
        tonic::Status::resource_exhausted(format!(
            "{path}: the request message of {size} bytes is larger than the daemon's limit of \
             {limit} bytes"
        ))
    } else if m == TONIC_NO_MESSAGE && status.code() == tonic::Code::Internal {
        tonic::Status::unimplemented(format!(
            "{path}: a unary call takes exactly one request message; the request had none"
        ))
    } else if let Some(why) = m.strip_prefix(PROST_DECODE)
        && status.code() == tonic::Code::Internal
    {
        tonic::Status::internal(format!(
            "{path}: cannot decode the request as this call's protobuf message: {why}"
        ))
    } else {
        return resp;
    };
    let headers = resp.headers_mut();
    headers.remove("grpc-message");
    headers.remove("grpc-status-details-bin");
    if let Err(e) = fixed.add_header(headers) {
        tracing::warn!(%path, "cannot rewrite the status of a malformed request: {e}");
    }
    resp
}

/// `grpc-timeout` (gRPC over HTTP/2 spec): at most 8 ASCII digits and a unit.
pub fn parse_grpc_timeout(v: &[u8]) -> Option<Duration> {
    let (unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n.checked_mul(3600)?),
        b'M' => Duration::from_secs(n.checked_mul(60)?),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_values_parse_per_the_spec() {
        assert_eq!(parse_grpc_timeout(b"1S"), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_grpc_timeout(b"250m"),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_grpc_timeout(b"99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
        assert_eq!(parse_grpc_timeout(b"5n"), Some(Duration::from_nanos(5)));
        for bad in [&b""[..], b"S", b"123456789S", b"1x", b"-1S", b"1.5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
        assert_eq!(margin(Duration::from_millis(20)), Duration::from_millis(5));
        assert_eq!(
            margin(Duration::from_millis(500)),
            Duration::from_millis(50)
        );
        assert_eq!(margin(Duration::from_secs(30)), Duration::from_millis(100));
        assert_eq!(margin(Duration::from_millis(4)), Duration::from_millis(2));
    }

    #[test]
    fn tonics_answers_to_malformed_requests_follow_the_spec_and_ours_stay() {
        let code_of = |r: &http::Response<tonic::body::Body>| {
            tonic::Status::from_header_map(r.headers()).unwrap()
        };
        let over = tonic::Status::out_of_range(
            "Error, decoded message length too large: found 5242885 bytes, the limit is: \
             4194304 bytes",
        )
        .into_http();
        let s = code_of(&tonic_answers_per_spec("/v1.Filesystem/Mkdir", over));
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            s.message(),
            "/v1.Filesystem/Mkdir: the request message of 5242885 bytes is larger than the \
             daemon's limit of 4194304 bytes"
        );
        let none = tonic::Status::internal("Missing request message.").into_http();
        let s = code_of(&tonic_answers_per_spec("/v1.Disk/X", none));
        assert_eq!(s.code(), tonic::Code::Unimplemented);
        assert!(s.message().starts_with("/v1.Disk/X: a unary call"), "{s:?}");
        let bad = tonic::Status::internal(
            "failed to decode Protobuf message: invalid string value: data is not UTF-8 encoded",
        )
        .into_http();
        let s = code_of(&tonic_answers_per_spec("/v1.Disk/X", bad));
        assert_eq!(s.code(), tonic::Code::Internal);
        assert_eq!(
            s.message(),
            "/v1.Disk/X: cannot decode the request as this call's protobuf message: invalid \
             string value: data is not UTF-8 encoded"
        );
        // Our own answers stay as they are.
        let ours =
            tonic::Status::out_of_range("disk GetDiskStats: offset past the end").into_http();
        let s = code_of(&tonic_answers_per_spec("/v1.Disk/X", ours));
        assert_eq!(s.code(), tonic::Code::OutOfRange);
        assert_eq!(s.message(), "disk GetDiskStats: offset past the end");
    }

    #[tokio::test]
    async fn the_handler_sees_the_moment_the_daemon_answers_deadline_exceeded() {
        use tower::{Layer as _, Service as _, ServiceExt as _};
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let mut svc = Layer.layer(tower::service_fn(move |req: http::Request<()>| {
            record
                .lock()
                .unwrap()
                .push(req.extensions().get::<CallDeadline>().map(|d| d.0));
            async {
                Ok::<_, std::convert::Infallible>(http::Response::new(tonic::body::Body::empty()))
            }
        }));
        let before = std::time::Instant::now();
        let req = http::Request::builder()
            .header("grpc-timeout", "2S")
            .body(())
            .unwrap();
        svc.ready().await.unwrap().call(req).await.unwrap();
        svc.ready()
            .await
            .unwrap()
            .call(http::Request::new(()))
            .await
            .unwrap();
        let seen = seen.lock().unwrap();
        let d = seen[0].expect("a deadline for a request with grpc-timeout");
        let answer_in = Duration::from_secs(2) - margin(Duration::from_secs(2));
        assert!(d >= before + answer_in && d <= std::time::Instant::now() + answer_in);
        assert_eq!(seen[1], None, "no grpc-timeout, no deadline");
    }
}
