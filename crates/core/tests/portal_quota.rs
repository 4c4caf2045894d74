//! The node's portal list stays within its limit under concurrent AddTargetPortal calls.
//!
//! The attack: 300 concurrent AddTargetPortal of distinct portals, each host add slow (on
//! Windows it discovers the portal's targets over the network). A limit checked against the
//! listing and then acted on let every call that listed before the others' adds landed pass:
//! 127 portals against the limit of 64, kept in the state directory across restarts. Here
//! every host add is held until each call has either reached the host or been refused, the
//! widest window there is; the list must end at the limit exactly.

use csi_proxy_core::iscsi::{IscsiService, MAX_PORTALS, RawTargetPortal, TargetPortal};
use csi_proxy_core::testing::PartialIscsiHost;
use csi_proxy_core::{Kind, Result};
use std::sync::{Arc, Condvar, Mutex};

const CALLS: usize = 300;

/// A portal list kept as the hosts keep it; each add waits for the test to open the gate.
#[derive(Default)]
struct SlowPortals {
    state: Mutex<Slow>,
    changed: Condvar,
}

#[derive(Default)]
struct Slow {
    list: Vec<TargetPortal>,
    /// Calls inside the host's add, waiting for the gate.
    adding: usize,
    open: bool,
}

impl PartialIscsiHost for SlowPortals {
    fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        Ok(self.state.lock().unwrap().list.clone())
    }
    fn add_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        let mut s = self.state.lock().unwrap();
        s.adding += 1;
        self.changed.notify_all();
        while !s.open {
            s = self.changed.wait(s).unwrap();
        }
        if !s.list.contains(portal) {
            s.list.push(portal.clone());
        }
        Ok(())
    }
}

#[test]
fn concurrent_adds_never_register_more_portals_than_the_limit() {
    let host = Arc::new(SlowPortals::default());
    let svc = IscsiService::new(host.clone());
    let refused = Arc::new(Mutex::new(Vec::new()));
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let (svc, host, refused) = (svc.clone(), host.clone(), refused.clone());
            std::thread::spawn(move || {
                let portal = RawTargetPortal {
                    address: format!("10.1.{}.{}", i / 200, i % 200 + 1),
                    port: 3260,
                };
                if let Err(e) = svc.add_target_portal(Some(&portal)) {
                    // Counted under the host's lock, which the test waits on.
                    let _s = host.state.lock().unwrap();
                    refused.lock().unwrap().push(e);
                    host.changed.notify_all();
                }
            })
        })
        .collect();
    // Every call is inside the host's add or refused before the first add lands.
    {
        let mut s = host.state.lock().unwrap();
        while s.adding + refused.lock().unwrap().len() < CALLS {
            s = host.changed.wait(s).unwrap();
        }
        s.open = true;
        host.changed.notify_all();
    }
    for c in calls {
        c.join().unwrap();
    }
    let registered = host.state.lock().unwrap().list.len();
    assert_eq!(
        registered, MAX_PORTALS,
        "portals registered by {CALLS} calls"
    );
    let refused = refused.lock().unwrap();
    assert_eq!(refused.len(), CALLS - MAX_PORTALS);
    for e in refused.iter() {
        assert_eq!(e.kind(), Kind::ResourceExhausted, "{e}");
        assert!(
            e.message().contains("AddTargetPortal")
                && e.message().contains(&format!("limit ({MAX_PORTALS})")),
            "{}",
            e.message()
        );
    }
    // Retries of a registered portal still succeed at the limit; a new one does not.
    let again = RawTargetPortal {
        address: "10.1.0.1".into(),
        port: 3260,
    };
    if host
        .state
        .lock()
        .unwrap()
        .list
        .iter()
        .any(|p| p.address == "10.1.0.1")
    {
        svc.add_target_portal(Some(&again)).unwrap();
    }
    let new = RawTargetPortal {
        address: "10.9.9.9".into(),
        port: 3260,
    };
    assert_eq!(
        svc.add_target_portal(Some(&new)).unwrap_err().kind(),
        Kind::ResourceExhausted
    );
}
