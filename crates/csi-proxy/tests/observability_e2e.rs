//! End-to-end observability: the real `csi-proxy` binary serving `/metrics` on a TCP port and the
//! standard gRPC health service on every endpoint.
#![cfg(target_os = "linux")]

mod common;

use common::Daemon;
use csi_proxy_client::filesystem::FilesystemClient;
use csi_proxy_client::health::{self, HealthError, ServingStatus};
use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 GET; returns (status line, body).
fn http_get(port: u16, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").expect("a response head");
    let status = head.lines().next().unwrap().to_string();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .parse()
        .unwrap();
    assert_eq!(len, body.len(), "Content-Length matches the body");
    (status, body.to_string())
}

/// A parsed sample: metric name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// Parses Prometheus text format 0.0.4 strictly enough to catch malformed output: every sample
/// line is `name{k="v",...} value`, and every sample's family has `# TYPE` declared before it.
fn parse(text: &str) -> Vec<Sample> {
    let mut typed = HashSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut p = rest.split(' ');
            let name = p.next().unwrap();
            let kind = p.next().unwrap();
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(typed.insert(name.to_string()), "TYPE twice: {line}");
            continue;
        }
        if line.starts_with("# HELP ") || line.is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect(line);
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').expect(line)),
            None => (series, ""),
        };
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{line}"
        );
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
            .unwrap_or(name);
        assert!(typed.contains(family), "no TYPE before {line}");
        let mut map = BTreeMap::new();
        if !labels.is_empty() {
            for kv in labels.split("\",") {
                let (k, v) = kv.split_once("=\"").expect(line);
                map.insert(k.to_string(), v.trim_end_matches('"').to_string());
            }
        }
        out.push((name.to_string(), map, value));
    }
    out
}

fn value(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && want
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.2)
}

#[tokio::test]
async fn metrics_count_real_rpcs_with_codes_and_latency() {
    let port = free_port();
    let d = Daemon::start(&[&format!("--metrics-bind-address=127.0.0.1:{port}")]);
    let mut fs = FilesystemClient::connect(&d.connector()).await.unwrap();
    let inside = d.kubelet.join("x").display().to_string();
    for _ in 0..3 {
        assert!(!fs.path_exists(&inside).await.unwrap());
    }
    // Outside every root: refused, so a non-OK code is counted.
    let refused = fs.path_exists("/etc/passwd").await.unwrap_err().code();

    let (status, body) = http_get(port, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let s = parse(&body);
    let pe = [
        ("grpc_service", "v1.Filesystem"),
        ("grpc_method", "PathExists"),
        ("grpc_type", "unary"),
        ("group", "filesystem"),
        ("version", "v1"),
        ("profile", ""),
    ];
    assert_eq!(value(&s, "grpc_server_started_total", &pe), Some(4.0));
    let with_code = |c: &'static str| {
        let mut l = pe.to_vec();
        l.push(("grpc_code", c));
        l
    };
    assert_eq!(
        value(&s, "grpc_server_handled_total", &with_code("OK")),
        Some(3.0)
    );
    let code_name = format!("{refused:?}");
    let code_name: &'static str = Box::leak(code_name.into_boxed_str());
    assert_eq!(
        value(&s, "grpc_server_handled_total", &with_code(code_name)),
        Some(1.0),
        "{body}"
    );
    // Histogram: cumulative buckets, +Inf equals the count.
    let mut last = 0.0;
    for le in [
        "0.001", "0.01", "0.1", "0.3", "0.6", "1", "3", "120", "+Inf",
    ] {
        let mut l = pe.to_vec();
        l.push(("le", le));
        let v = value(&s, "grpc_server_handling_seconds_bucket", &l).expect(le);
        assert!(v >= last, "bucket {le} not cumulative");
        last = v;
    }
    assert_eq!(last, 4.0);
    assert_eq!(
        value(&s, "grpc_server_handling_seconds_count", &pe),
        Some(4.0)
    );
    assert!(value(&s, "grpc_server_handling_seconds_sum", &pe).unwrap() > 0.0);
    assert!(value(&s, "process_resident_memory_bytes", &[]).unwrap() > 1e6);
    assert!(value(&s, "process_open_fds", &[]).unwrap() >= 23.0);
    assert!(value(&s, "process_cpu_seconds_total", &[]).is_some());
    assert!(value(&s, "process_start_time_seconds", &[]).unwrap() > 1.6e9);
    assert_eq!(value(&s, "csi_proxy_smb_global_mappings", &[]), Some(0.0));

    // More calls: the counters move.
    for _ in 0..5 {
        fs.path_exists(&inside).await.unwrap();
    }
    let s = parse(&http_get(port, "/metrics").1);
    assert_eq!(value(&s, "grpc_server_started_total", &pe), Some(9.0));
    assert_eq!(
        value(&s, "grpc_server_handled_total", &with_code("OK")),
        Some(8.0)
    );

    assert_eq!(http_get(port, "/").0, "HTTP/1.1 404 Not Found");
}

/// Under `--profiles`, each call's series and its request log line name the profile whose
/// endpoint took it.
#[tokio::test]
async fn under_profiles_each_series_and_request_line_names_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = dir.path().join("kubelet");
    let sockets = dir.path().join("run");
    std::fs::create_dir_all(&kubelet).unwrap();
    let file = dir.path().join("profiles.toml");
    std::fs::write(
        &file,
        format!(
            "[[profile]]\ndriver = \"obs.csi.example.com\"\nsocket_dir = {:?}\n\
             groups = [\"filesystem\"]\n",
            sockets.display().to_string()
        ),
    )
    .unwrap();
    let port = free_port();
    let log = dir.path().join("daemon.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_csi-proxy"));
    cmd.arg(format!("--kubelet-path={}", kubelet.display()))
        .arg(format!("--socket-dir={}", sockets.display()))
        .arg(format!(
            "--state-dir={}",
            dir.path().join("state").display()
        ))
        .arg(format!("--profiles={}", file.display()))
        .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
        .arg("-v=4")
        .stdin(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    if !common::every_process_readable() {
        cmd.arg("--skip-unreadable-processes");
    }
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Kill(cmd.spawn().unwrap());
    let last = sockets.join("csi-proxy-iscsi-v1alpha2.sock");
    let t = std::time::Instant::now();
    while std::os::unix::net::UnixStream::connect(&last).is_err() {
        if let Ok(Some(s)) = child.0.try_wait() {
            panic!(
                "daemon exited ({s}): {}",
                std::fs::read_to_string(&log).unwrap()
            );
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "daemon did not serve"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let connector = csi_proxy_client::Connector::SocketDir(sockets.clone());
    let mut fs = FilesystemClient::connect(&connector).await.unwrap();
    let inside = kubelet.join("x").display().to_string();
    for _ in 0..2 {
        // Answered or refused by the profile: either way counted under its name.
        let _ = fs.path_exists(&inside).await;
    }
    let s = parse(&http_get(port, "/metrics").1);
    let labels = |profile| {
        [
            ("grpc_method", "PathExists"),
            ("group", "filesystem"),
            ("version", "v1"),
            ("profile", profile),
        ]
    };
    assert_eq!(
        value(
            &s,
            "grpc_server_started_total",
            &labels("obs.csi.example.com")
        ),
        Some(2.0)
    );
    assert_eq!(value(&s, "grpc_server_started_total", &labels("")), None);
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("method=\"PathExists\"") && l.contains("request"))
        .unwrap_or_else(|| panic!("no request line in:\n{text}"));
    assert!(line.contains("profile=\"obs.csi.example.com\""), "{line}");
}

/// Inodes of listening TCP sockets (IPv4 and IPv6) on this machine.
fn listening_inodes() -> HashSet<String> {
    let mut set = HashSet::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // Column 3 is the state (0A = LISTEN), column 9 the inode.
            if cols.get(3) == Some(&"0A")
                && let Some(inode) = cols.get(9)
            {
                set.insert(inode.to_string());
            }
        }
    }
    set
}

fn listening_sockets_of(pid: u32) -> usize {
    let listening = listening_inodes();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')
                .map(str::to_string)
        })
        .filter(|inode| listening.contains(inode))
        .count()
}

#[test]
fn no_metrics_flag_means_nothing_listens() {
    let off = Daemon::start(&[]);
    assert_eq!(listening_sockets_of(off.child.id()), 0);
    let empty = Daemon::start(&["--metrics-bind-address="]);
    assert_eq!(listening_sockets_of(empty.child.id()), 0);
    // Control: the same check sees the listener when the flag is set.
    let on = Daemon::start(&[&format!("--metrics-bind-address=127.0.0.1:{}", free_port())]);
    assert_eq!(listening_sockets_of(on.child.id()), 1);
}

#[test]
fn a_bad_metrics_address_fails_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_csi-proxy"))
        .arg(format!("-kubelet-path={}", dir.path().display()))
        .arg(format!("--socket-dir={}", dir.path().join("run").display()))
        .arg("--metrics-bind-address=not an address")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--metrics-bind-address"), "{err}");
    assert!(!dir.path().join("run/csi-proxy-disk-v1.sock").exists());
}

#[tokio::test]
async fn every_endpoint_answers_the_grpc_health_service() {
    let d = Daemon::start(&[]);
    let c = d.connector();
    let mut n = 0;
    for group in csi_proxy_api::GROUPS {
        for version in csi_proxy_api::versions(group).unwrap() {
            let own = health::service_name(group, version);
            for service in ["", own.as_str()] {
                let st = health::check(&c, group, version, service).await;
                assert_eq!(
                    st.unwrap(),
                    ServingStatus::Serving,
                    "{group} {version} {service:?}"
                );
            }
            match health::check(&c, group, version, "v9.Nothing").await {
                Err(HealthError::Status(s)) => assert_eq!(s.code(), tonic::Code::NotFound),
                other => panic!("{group} {version}: {other:?}"),
            }
            n += 1;
        }
    }
    assert_eq!(n, 23);
}
