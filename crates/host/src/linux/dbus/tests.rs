//! The client against a bus address and a bus that stays silent.

use super::connection::{BusAddress, parse_address};
use super::*;
use std::time::Instant;

#[test]
fn addresses_parse() {
    assert_eq!(
        parse_address("unix:path=/run/dbus/system_bus_socket").unwrap(),
        BusAddress::Path("/run/dbus/system_bus_socket".into())
    );
    assert_eq!(
        parse_address("unix:abstract=/tmp/x%2cy,guid=00;unix:path=/b").unwrap(),
        BusAddress::Abstract(b"/tmp/x,y".to_vec())
    );
    assert!(parse_address("tcp:host=localhost,port=1").is_err());
    assert!(parse_address("unix:tmpdir=/tmp").is_err());
    assert!(parse_address("unix:path=%zz").is_err());
}

#[test]
fn a_silent_bus_times_out_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("bus");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let t = Instant::now();
    let e = Connection::connect(
        &format!("unix:path={}", sock.display()),
        Duration::from_millis(200),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Io(io) if io.kind() == io::ErrorKind::TimedOut),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    drop(listener);
}
