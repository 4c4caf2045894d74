//! The Linux system host against a real D-Bus message bus: a private `dbus-daemon` and a fake
//! systemd (this file's own, speaking through the host's D-Bus client) that owns
//! `org.freedesktop.systemd1` and serves LoadUnit, StartUnit, StopUnit and Properties.Get over
//! an in-memory table of units whose states change over time as systemd's do.

use super::dbus::{Connection, Message, MessageType, Value};
use super::system::LinuxSystemHost;
use csi_proxy_core::Kind;
use csi_proxy_core::system::{ServiceStatus, StartType, SystemHost};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A private message bus, killed on drop.
struct Bus {
    child: Child,
    /// The `unix:path=` address.
    address: String,
    /// Everything dbus-daemon printed: its addresses, `;`-separated (abstract one first).
    printed: String,
    _dir: tempfile::TempDir,
}

impl Bus {
    /// Starts `dbus-daemon` on a socket in a temp dir; `None` (after printing SKIPPED) when
    /// there is no dbus-daemon.
    fn start() -> Option<Bus> {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path={}/bus</listen>
  <listen>unix:abstract={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                dir.path().display(),
                dir.path().display(),
            ),
        )
        .unwrap();
        let spawned = Command::new("dbus-daemon")
            .args(["--nofork", "--print-address"])
            .arg(format!("--config-file={}", config.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                println!("SKIPPED: dbus-daemon is not installed ({e})");
                return None;
            }
            Err(e) => panic!("dbus-daemon: {e}"),
        };
        // The address is printed once the bus listens.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let printed = line.trim().to_string();
        let address = printed
            .split(';')
            .find(|a| a.starts_with("unix:path="))
            .unwrap_or_else(|| panic!("dbus-daemon printed {line:?}"))
            .to_string();
        Some(Bus {
            child,
            address,
            printed,
            _dir: dir,
        })
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a unit of the fake reacts to StartUnit.
#[derive(Clone, Copy)]
enum Start {
    /// Active at once.
    Quick,
    /// Activating for this long, then active.
    Slow(Duration),
    /// Activating for 100 ms, then failed.
    Fails,
    /// Activating for ever.
    Stuck,
}

struct Unit {
    description: &'static str,
    load_state: &'static str,
    unit_file_state: &'static str,
    active_state: &'static str,
    /// The state the running job leads to, and when.
    job: Option<(Instant, &'static str)>,
    start: Start,
}

/// The fake manager's state, shared with the test.
#[derive(Default)]
struct Fake {
    units: HashMap<String, Unit>,
    /// Unit names by the object path LoadUnit handed out.
    paths: HashMap<String, String>,
    /// Manager calls by "Member unit".
    calls: HashMap<String, u32>,
}

impl Fake {
    fn with_units() -> Fake {
        let mut f = Fake::default();
        let mut add = |name: &str, description, load_state, file, active, start| {
            f.units.insert(
                name.to_string(),
                Unit {
                    description,
                    load_state,
                    unit_file_state: file,
                    active_state: active,
                    job: None,
                    start,
                },
            );
        };
        add(
            "alpha.service",
            "Alpha Daemon",
            "loaded",
            "enabled",
            "active",
            Start::Quick,
        );
        add(
            "beta.service",
            "Beta Worker",
            "loaded",
            "disabled",
            "inactive",
            Start::Quick,
        );
        add(
            "gamma.service",
            "Gamma",
            "masked",
            "masked",
            "inactive",
            Start::Quick,
        );
        add(
            "flaky.service",
            "Flaky",
            "loaded",
            "static",
            "inactive",
            Start::Fails,
        );
        let slow = Start::Slow(Duration::from_millis(300));
        add(
            "slow.service",
            "Slow Starter",
            "loaded",
            "enabled-runtime",
            "inactive",
            slow,
        );
        add(
            "stuck.service",
            "Stuck",
            "loaded",
            "indirect",
            "inactive",
            Start::Stuck,
        );
        f
    }

    fn count(&self, call: &str) -> u32 {
        self.calls.get(call).copied().unwrap_or(0)
    }

    /// Ends the jobs whose time has come.
    fn settle(&mut self) {
        let now = Instant::now();
        for u in self.units.values_mut() {
            if let Some((at, to)) = u.job
                && now >= at
            {
                u.active_state = to;
                u.job = None;
            }
        }
    }

    /// Answers one method call: `Ok(args)` or `Err((error name, text))`.
    fn handle(&mut self, m: &Message) -> Result<Vec<Value>, (String, String)> {
        self.settle();
        let args = m
            .args()
            .map_err(|e| ("org.test.BadArgs".into(), e.to_string()))?;
        let arg = |i: usize| {
            args.get(i)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let iface = m.interface.as_deref().unwrap_or("");
        let member = m.member.as_deref().unwrap_or("");
        let path = m.path.as_deref().unwrap_or("");
        match (iface, member) {
            ("org.freedesktop.systemd1.Manager", "LoadUnit") => {
                let name = arg(0);
                *self.calls.entry(format!("LoadUnit {name}")).or_default() += 1;
                let p = format!("/org/freedesktop/systemd1/unit/u{}", self.paths.len());
                let p = match self.paths.iter().find(|(_, n)| **n == name) {
                    Some((p, _)) => p.clone(),
                    None => {
                        self.paths.insert(p.clone(), name);
                        p
                    }
                };
                Ok(vec![Value::ObjectPath(p)])
            }
            ("org.freedesktop.systemd1.Manager", "StartUnit" | "StopUnit") => {
                let name = arg(0);
                *self.calls.entry(format!("{member} {name}")).or_default() += 1;
                if arg(1) != "replace" {
                    return Err(("org.test.Mode".into(), arg(1)));
                }
                let Some(u) = self.units.get_mut(&name) else {
                    return Err((
                        "org.freedesktop.systemd1.NoSuchUnit".into(),
                        format!("Unit {name} not found."),
                    ));
                };
                if u.load_state == "masked" {
                    return Err((
                        "org.freedesktop.systemd1.UnitMasked".into(),
                        format!("Unit {name} is masked."),
                    ));
                }
                let now = Instant::now();
                if member == "StopUnit" {
                    u.active_state = "deactivating";
                    u.job = Some((now + Duration::from_millis(100), "inactive"));
                } else {
                    match u.start {
                        Start::Quick => u.active_state = "active",
                        Start::Slow(d) => {
                            u.active_state = "activating";
                            u.job = Some((now + d, "active"));
                        }
                        Start::Fails => {
                            u.active_state = "activating";
                            u.job = Some((now + Duration::from_millis(100), "failed"));
                        }
                        Start::Stuck => {
                            u.active_state = "activating";
                            u.job = Some((now + Duration::from_secs(3600), "active"));
                        }
                    }
                }
                Ok(vec![Value::ObjectPath(
                    "/org/freedesktop/systemd1/job/1".into(),
                )])
            }
            ("org.freedesktop.DBus.Properties", "Get") => {
                let Some(name) = self.paths.get(path).cloned() else {
                    return Err((
                        "org.freedesktop.DBus.Error.UnknownObject".into(),
                        path.into(),
                    ));
                };
                if arg(0) != "org.freedesktop.systemd1.Unit" {
                    return Err(("org.freedesktop.DBus.Error.UnknownInterface".into(), arg(0)));
                }
                let s = |v: &str| Value::Str(v.to_string());
                let v = match (self.units.get(&name), arg(1).as_str()) {
                    (Some(u), "LoadState") => s(u.load_state),
                    (Some(u), "ActiveState") => s(u.active_state),
                    (Some(u), "Description") => s(u.description),
                    (Some(u), "UnitFileState") => s(u.unit_file_state),
                    (Some(u), "Job") if u.job.is_some() => Value::Struct(vec![
                        Value::U32(1),
                        Value::ObjectPath("/org/freedesktop/systemd1/job/1".into()),
                    ]),
                    // Not loaded: what systemd answers for a unit with no file.
                    (None, "LoadState") => s("not-found"),
                    (None, "ActiveState") => s("inactive"),
                    (None, "Description") => s(&name),
                    (None, "UnitFileState") => s(""),
                    (_, "Job") => Value::Struct(vec![Value::U32(0), Value::ObjectPath("/".into())]),
                    (_, p) => {
                        return Err((
                            "org.freedesktop.DBus.Error.UnknownProperty".into(),
                            p.to_string(),
                        ));
                    }
                };
                Ok(vec![Value::Variant(Box::new(v))])
            }
            _ => Err((
                "org.freedesktop.DBus.Error.UnknownMethod".into(),
                format!("{iface}.{member}"),
            )),
        }
    }
}

/// Connects a fake systemd to `address` and serves it on a thread until the bus goes away.
fn serve_fake(address: &str) -> Arc<Mutex<Fake>> {
    let fake = Arc::new(Mutex::new(Fake::with_units()));
    let mut conn = Connection::connect(address, Duration::from_secs(10)).unwrap();
    conn.request_name("org.freedesktop.systemd1").unwrap();
    let f = fake.clone();
    std::thread::spawn(move || {
        // Ends when the bus is killed (end of file) at the end of the test.
        while let Ok(m) = conn.next_message(Duration::from_secs(600)) {
            if m.kind != MessageType::MethodCall {
                continue; // NameAcquired and other signals
            }
            let answer = f.lock().unwrap().handle(&m);
            let sent = match answer {
                Ok(args) => conn.reply(&m, &args),
                Err((name, text)) => conn.reply_error(&m, &name, &text),
            };
            if sent.is_err() {
                break;
            }
        }
    });
    fake
}

/// A bus with the fake on it and a host pointed at it.
fn setup() -> Option<(Bus, Arc<Mutex<Fake>>, LinuxSystemHost)> {
    let bus = Bus::start()?;
    let fake = serve_fake(&bus.address);
    let host = LinuxSystemHost::with_bus_address(&bus.address);
    Some((bus, fake, host))
}

#[test]
fn get_service_reports_each_unit() {
    let Some((_bus, fake, host)) = setup() else {
        return;
    };
    let cases = [
        (
            "alpha",
            "Alpha Daemon",
            StartType::Automatic,
            ServiceStatus::Running,
        ),
        (
            "alpha.service",
            "Alpha Daemon",
            StartType::Automatic,
            ServiceStatus::Running,
        ),
        (
            "beta",
            "Beta Worker",
            StartType::Manual,
            ServiceStatus::Stopped,
        ),
        (
            "gamma",
            "Gamma",
            StartType::Disabled,
            ServiceStatus::Stopped,
        ),
        ("flaky", "Flaky", StartType::Manual, ServiceStatus::Stopped),
        (
            "slow",
            "Slow Starter",
            StartType::Automatic,
            ServiceStatus::Stopped,
        ),
        ("stuck", "Stuck", StartType::Manual, ServiceStatus::Stopped),
    ];
    for (name, display, start, status) in cases {
        let info = host.get_service(name).unwrap();
        assert_eq!(info.display_name, display, "{name}");
        assert_eq!(info.start_type, start, "{name}");
        assert_eq!(info.status, status, "{name}");
    }
    let f = fake.lock().unwrap();
    assert_eq!(f.count("LoadUnit alpha.service"), 2);
    assert_eq!(f.count("LoadUnit beta.service"), 1);

    // Several requests at once each have their own connection.
    drop(f);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                assert_eq!(
                    host.get_service("alpha").unwrap().status,
                    ServiceStatus::Running
                )
            });
        }
    });
}

#[test]
fn start_and_stop_change_the_state_and_are_idempotent() {
    let Some((_bus, fake, host)) = setup() else {
        return;
    };
    // Stopped -> running.
    host.start_service("beta").unwrap();
    assert_eq!(
        host.get_service("beta").unwrap().status,
        ServiceStatus::Running
    );
    assert_eq!(fake.lock().unwrap().count("StartUnit beta.service"), 1);
    // Already running: success without a job.
    host.start_service("beta").unwrap();
    host.start_service("alpha").unwrap();
    assert_eq!(fake.lock().unwrap().count("StartUnit beta.service"), 1);
    assert_eq!(fake.lock().unwrap().count("StartUnit alpha.service"), 0);

    // Running -> stopped, through 100 ms of deactivating that the host waits for.
    let t = Instant::now();
    host.stop_service("alpha", false).unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        host.get_service("alpha").unwrap().status,
        ServiceStatus::Stopped
    );
    assert_eq!(fake.lock().unwrap().count("StopUnit alpha.service"), 1);
    // Already stopped: success without a job.
    host.stop_service("alpha", true).unwrap();
    host.stop_service("gamma", true).unwrap();
    let f = fake.lock().unwrap();
    assert_eq!(f.count("StopUnit alpha.service"), 1);
    assert_eq!(f.count("StopUnit gamma.service"), 0);
}

#[test]
fn a_slow_start_is_waited_for_and_a_failed_one_reported() {
    let Some((_bus, fake, host)) = setup() else {
        return;
    };
    let t = Instant::now();
    host.start_service("slow").unwrap();
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(
        host.get_service("slow").unwrap().status,
        ServiceStatus::Running
    );

    let e = host.start_service("flaky").unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert!(
        e.message().starts_with("StartService service \"flaky\": ")
            && e.message().contains("failed"),
        "{}",
        e.message()
    );
    assert_eq!(fake.lock().unwrap().count("StartUnit flaky.service"), 1);

    // Masked: refused before any job is asked for.
    let e = host.start_service("gamma").unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert!(e.message().contains("masked"), "{}", e.message());
    assert_eq!(fake.lock().unwrap().count("StartUnit gamma.service"), 0);

    // A unit that never comes up: DEADLINE_EXCEEDED once the (shortened) wait is over.
    let short = LinuxSystemHost::with_bus_address(&_bus.address).wait(Duration::from_millis(500));
    let t = Instant::now();
    let e = short.start_service("stuck").unwrap_err();
    assert!(t.elapsed() >= Duration::from_millis(500));
    assert_eq!(e.kind(), Kind::DeadlineExceeded, "{}", e.message());
    assert!(
        e.message().starts_with("StartService service \"stuck\": ")
            && e.message().contains("\"activating\"")
            && e.message().contains("starting stuck.service"),
        "{}",
        e.message()
    );
}

#[test]
fn unknown_and_invalid_names_are_refused() {
    let Some((_bus, fake, host)) = setup() else {
        return;
    };
    for e in [
        host.get_service("nope").unwrap_err(),
        host.start_service("nope").unwrap_err(),
        host.stop_service("nope", true).unwrap_err(),
    ] {
        assert_eq!(e.kind(), Kind::NotFound, "{}", e.message());
        assert!(e.message().contains("service \"nope\""), "{}", e.message());
        assert!(e.message().contains("nope.service"), "{}", e.message());
    }
    let f = fake.lock().unwrap();
    assert_eq!(f.count("LoadUnit nope.service"), 3);
    assert_eq!(
        f.count("StartUnit nope.service") + f.count("StopUnit nope.service"),
        0
    );
    drop(f);

    let long = "a".repeat(300);
    for name in ["a b", "../etc/passwd", "kübelet", "x;reboot", long.as_str()] {
        for e in [
            host.get_service(name).unwrap_err(),
            host.start_service(name).unwrap_err(),
            host.stop_service(name, false).unwrap_err(),
        ] {
            assert_eq!(e.kind(), Kind::InvalidArgument, "{name}: {}", e.message());
        }
    }
    // None of them reached systemd.
    assert_eq!(fake.lock().unwrap().calls.values().sum::<u32>(), 3);
}

/// `reboot.target` is a unit name systemd accepts; starting it reboots the node. Only services
/// are started or stopped, and the refusal comes before systemd is asked anything.
#[test]
fn units_other_than_services_are_never_started_or_stopped() {
    let Some((_bus, fake, host)) = setup() else {
        return;
    };
    for name in ["reboot.target", "var-lib-kubelet.mount", "docker.socket"] {
        for e in [
            host.start_service(name).unwrap_err(),
            host.stop_service(name, true).unwrap_err(),
        ] {
            assert_eq!(e.kind(), Kind::PermissionDenied, "{name}: {}", e.message());
            assert!(
                e.message().contains("only .service units"),
                "{}",
                e.message()
            );
        }
    }
    assert_eq!(fake.lock().unwrap().calls.values().sum::<u32>(), 0);
}

#[test]
fn an_unreachable_bus_or_absent_systemd_fails_the_precondition() {
    let Some(bus) = Bus::start() else {
        return;
    };
    // No socket at the address.
    let dir = tempfile::tempdir().unwrap();
    let gone = format!("unix:path={}/no-bus", dir.path().display());
    let host = LinuxSystemHost::with_bus_address(&gone);
    for e in [
        host.get_service("alpha").unwrap_err(),
        host.start_service("alpha").unwrap_err(),
        host.stop_service("alpha", true).unwrap_err(),
    ] {
        assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
        assert!(
            e.message().contains(&format!(
                "systemd (D-Bus system bus at {gone}) is not reachable: "
            )),
            "{}",
            e.message()
        );
    }
    // A bus without systemd on it: the bus says no one owns the name.
    let host = LinuxSystemHost::with_bus_address(&bus.address);
    let e = host.get_service("alpha").unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert!(
        e.message()
            .contains("org.freedesktop.DBus.Error.ServiceUnknown"),
        "{}",
        e.message()
    );
}

#[test]
fn abstract_sockets_and_address_lists_are_followed() {
    let Some((bus, _fake, _)) = setup() else {
        return;
    };
    assert!(bus.printed.starts_with("unix:abstract="), "{}", bus.printed);
    // The whole list: its first entry, the abstract socket, is used.
    let host = LinuxSystemHost::with_bus_address(&bus.printed);
    assert_eq!(
        host.get_service("alpha").unwrap().status,
        ServiceStatus::Running
    );
    // An abstract name that no one listens on.
    let host = LinuxSystemHost::with_bus_address("unix:abstract=csi-proxy-no-such-bus");
    let e = host.get_service("alpha").unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
}
