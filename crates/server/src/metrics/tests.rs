//! The series, their text encoding and the HTTP responder.

use super::http::MAX_HEAD;
use super::*;
use std::sync::atomic::AtomicU64;

#[test]
fn service_names_are_upstream_wire_names() {
    assert_eq!(service_name("disk", "v1"), "v1.Disk");
    assert_eq!(service_name("iscsi", "v1alpha2"), "v1alpha2.Iscsi");
    assert_eq!(service_name("smb", "v1beta1"), "v1beta1.Smb");
}

#[test]
fn a_request_lands_in_its_bucket_and_code() {
    let rpc = RpcId {
        group: "system",
        version: "v1alpha1",
        method: "MetricsUnitTest",
        profile: "",
    };
    let s = started(rpc);
    s.handled(tonic::Code::NotFound, Duration::from_millis(50));
    let text = render();
    let l = "grpc_method=\"MetricsUnitTest\",grpc_service=\"v1alpha1.System\",grpc_type=\"unary\",group=\"system\",version=\"v1alpha1\",profile=\"\"";
    assert!(text.contains(&format!("grpc_server_started_total{{{l}}} 1")));
    assert!(text.contains(&format!(
        "grpc_server_handled_total{{grpc_code=\"NotFound\",{l}}} 1"
    )));
    assert!(text.contains(&format!(
        "grpc_server_handling_seconds_bucket{{{l},le=\"0.01\"}} 0"
    )));
    assert!(text.contains(&format!(
        "grpc_server_handling_seconds_bucket{{{l},le=\"0.1\"}} 1"
    )));
    assert!(text.contains(&format!(
        "grpc_server_handling_seconds_bucket{{{l},le=\"+Inf\"}} 1"
    )));
    assert!(text.contains(&format!("grpc_server_msg_sent_total{{{l}}} 0")));
}

#[test]
fn each_profile_has_its_own_series_labelled_with_its_driver_name() {
    let rpc = |profile| RpcId {
        group: "system",
        version: "v1alpha1",
        method: "MetricsProfileTest",
        profile,
    };
    InFlight::start(rpc("")).finish(tonic::Code::Ok);
    for _ in 0..2 {
        InFlight::start(rpc("smb.csi.k8s.io")).finish(tonic::Code::PermissionDenied);
    }
    let text = render();
    let l = |p: &str| {
        format!(
            "grpc_method=\"MetricsProfileTest\",grpc_service=\"v1alpha1.System\",\
             grpc_type=\"unary\",group=\"system\",version=\"v1alpha1\",profile=\"{p}\""
        )
    };
    let driver = l("smb.csi.k8s.io");
    let none = l("");
    assert!(
        text.contains(&format!("grpc_server_started_total{{{none}}} 1")),
        "{text}"
    );
    assert!(
        text.contains(&format!("grpc_server_started_total{{{driver}}} 2")),
        "{text}"
    );
    assert!(text.contains(&format!(
        "grpc_server_handled_total{{grpc_code=\"PermissionDenied\",{driver}}} 2"
    )));
    assert!(text.contains(&format!("grpc_server_handling_seconds_count{{{driver}}} 2")));
    assert!(!text.contains(&format!(
        "grpc_server_handled_total{{grpc_code=\"PermissionDenied\",{none}}}"
    )));
}

#[test]
fn profile_names_are_kept_once_each() {
    let a = crate::call::profile_label(Some(&String::from("a.example.com")));
    let b = crate::call::profile_label(Some(&String::from("a.example.com")));
    assert!(std::ptr::eq(a, b));
    assert_eq!(a, "a.example.com");
    assert_eq!(crate::call::profile_label(None), "");
}

#[test]
fn a_dropped_request_counts_as_canceled() {
    let rpc = RpcId {
        group: "system",
        version: "v1alpha1",
        method: "MetricsDropTest",
        profile: "",
    };
    drop(InFlight::start(rpc));
    InFlight::start(rpc).finish(tonic::Code::Ok);
    let text = render();
    assert!(text.contains(
        "grpc_server_handled_total{grpc_code=\"Canceled\",grpc_method=\"MetricsDropTest\""
    ));
    assert!(
        text.contains("grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"MetricsDropTest\"")
    );
}

#[test]
fn a_request_dropped_for_its_deadline_counts_as_deadline_exceeded() {
    let rpc = RpcId {
        group: "system",
        version: "v1alpha1",
        method: "MetricsDeadlineTest",
        profile: "",
    };
    let running = InFlight::start(rpc);
    ending_for_deadline(|| drop(running));
    drop(InFlight::start(rpc)); // and afterwards a plain drop is a cancel again
    let text = render();
    assert!(text.contains(
        "grpc_server_handled_total{grpc_code=\"DeadlineExceeded\",grpc_method=\"MetricsDeadlineTest\""
    ), "{text}");
    assert!(text.contains(
        "grpc_server_handled_total{grpc_code=\"Canceled\",grpc_method=\"MetricsDeadlineTest\""
    ));
}

#[test]
fn smb_gauge_is_exported_pushed_or_counted() {
    set_smb_mappings(3);
    assert!(render().contains("\ncsi_proxy_smb_global_mappings 3\n"));
    // A registered counter wins when it has an answer.
    static COUNT: AtomicU64 = AtomicU64::new(u64::MAX);
    register_smb_mappings_counter(|| {
        let n = COUNT.load(Ordering::Relaxed);
        (n != u64::MAX).then_some(n)
    });
    assert_eq!(smb_mappings(), 3);
    COUNT.store(5, Ordering::Relaxed);
    assert!(render().contains("\ncsi_proxy_smb_global_mappings 5\n"));
    COUNT.store(u64::MAX, Ordering::Relaxed);
    set_smb_mappings(0);
}

#[cfg(any(target_os = "linux", windows))]
#[test]
fn process_metrics_are_read() {
    let s = process::read();
    assert!(s.resident_bytes.unwrap() > 0, "{s:?}");
    // Wine 8 (where the Windows-target tests run) answers GetProcessHandleCount with 0;
    // real Windows counts this process's handles.
    let fds = s.open_fds.unwrap();
    assert!(fds > 0 || cfg!(windows), "{s:?}");
    assert!(s.cpu_seconds.is_some(), "{s:?}");
    let start = s.start_time_seconds.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        start <= now + 1.0 && start > now - 86_400.0,
        "{start} vs {now}"
    );
}

/// One raw HTTP/1.1 request to a running `serve`; the whole answer, read until it closes.
async fn ask(addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut answer))
        .await
        .expect("the server closes the connection after one answer")
        .unwrap();
    answer
}

#[tokio::test]
async fn serves_get_and_head_on_metrics_only() {
    let listener = bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve(listener));

    let get = ask(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let (head, body) = get.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
        "{head}"
    );
    assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())));
    assert!(body.contains("# TYPE csi_proxy_smb_global_mappings gauge\n"));

    // HEAD: the head of the GET answer, no body.
    let head_only = ask(addr, "HEAD /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(head_only.starts_with("HTTP/1.1 200 OK\r\n"), "{head_only}");
    assert!(head_only.ends_with("\r\n\r\n"), "{head_only}");
    assert!(head_only.contains("\r\nContent-Length: "), "{head_only}");

    let post = ask(
        addr,
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    )
    .await;
    assert!(
        post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
        "{post}"
    );
    let other = ask(addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(other.starts_with("HTTP/1.1 404 Not Found\r\n"), "{other}");
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(MAX_HEAD)
    );
    assert!(ask(addr, &huge).await.starts_with("HTTP/1.1 431 "));
    let garbage = ask(addr, "NOT HTTP\r\n\r\n").await;
    assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");
    server.abort();
}

/// The listener's tests count its refusals: one at a time.
static LISTENER_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Past [`super::http::WAITING_CONNECTIONS`] connections that have sent no request, a new one
/// takes the place of the oldest (closed and counted), and a scrape is answered. Before, 16
/// silent connections took every place and the next connection was closed on accept.
#[tokio::test]
async fn the_metrics_listener_caps_its_connections() {
    use super::http::WAITING_CONNECTIONS;
    let _one = LISTENER_TESTS.lock().await;
    let listener = bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve(listener));
    let mut silent = Vec::new();
    for _ in 0..WAITING_CONNECTIONS {
        silent.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let before = refusals(Limit::MetricsConnections);
    let answered = ask(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(answered.starts_with("HTTP/1.1 200 OK\r\n"), "{answered:?}");
    assert!(answered.contains("csi_proxy_refused_total{limit=\"metrics_connections\"}"));
    assert!(
        closed_within(&mut silent[0], Duration::from_secs(1)).await,
        "the oldest silent connection was closed"
    );
    assert!(
        !closed_within(&mut silent[1], Duration::from_millis(100)).await,
        "the others are kept"
    );
    assert_eq!(refusals(Limit::MetricsConnections), before + 1);
    server.abort();
}

/// Whether `conn` is closed by the server within `within`.
async fn closed_within(conn: &mut tokio::net::TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 1];
    matches!(
        tokio::time::timeout(within, conn.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// 20 TCP connections that send nothing, kept open (each one the server closes is opened
/// again at once), never make a scrape fail; a connection silent for
/// [`super::http::REQUEST_TIMEOUT`] is closed. Before, they took every place (16) and each
/// scrape's connection was closed on accept, for as long as they were held.
#[tokio::test]
async fn silent_connections_never_hold_the_metrics_listener() {
    use super::http::REQUEST_TIMEOUT;
    let _one = LISTENER_TESTS.lock().await;
    let listener = bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve(listener));
    let stop = std::sync::Arc::new(tokio::sync::Notify::new());
    let holders: Vec<_> = (0..20)
        .map(|_| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut reopened = 0usize;
                loop {
                    let Ok(mut conn) = tokio::net::TcpStream::connect(addr).await else {
                        continue;
                    };
                    tokio::select! {
                        _ = closed_within(&mut conn, Duration::from_secs(3600)) => reopened += 1,
                        () = stop.notified() => return reopened,
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Scrapes through more than a request timeout, so connections closed for silence are
    // opened again meanwhile.
    let t = std::time::Instant::now();
    let mut scrapes = 0;
    while t.elapsed() < REQUEST_TIMEOUT + Duration::from_secs(2) {
        let answered = ask(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(
            answered.starts_with("HTTP/1.1 200 OK\r\n"),
            "scrape {scrapes} failed while 20 silent connections are held: {answered:?}"
        );
        scrapes += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.notify_waiters();
    let mut reopened = 0;
    for h in holders {
        h.abort();
        reopened += h.await.unwrap_or(0);
    }
    println!("{scrapes} scrapes answered; silent connections closed and reopened: {reopened}");
    server.abort();
}

#[test]
fn label_values_are_escaped() {
    // Our label values are identifiers, but the encoder must still escape what it is given.
    let rpc = RpcId {
        group: "system",
        version: "v1alpha1",
        method: "Metrics\"Escape\\Test\n",
        profile: "",
    };
    InFlight::start(rpc).finish(tonic::Code::Ok);
    let text = render();
    assert!(
        text.contains(r#"grpc_method="Metrics\"Escape\\Test\n""#),
        "{text}"
    );
}
