use super::*;
use prost::Message;

// The caps are process-wide: each test takes the places of a kind no other test uses.

const DISCOVER: RpcId = RpcId {
    group: "iscsi",
    version: "v1alpha2",
    method: "DiscoverTargetPortal",
    profile: "",
};

fn soon(ms: u64) -> Option<Instant> {
    Some(Instant::now() + Duration::from_millis(ms))
}

/// Every RPC of every version of the API is in the table, either as a kind of work that can
/// block or as a call that cannot hang: a new RPC fails this until it is classified.
#[test]
fn every_rpc_of_every_version_is_classified() {
    let mut blocking = 0;
    for group in csi_proxy_api::GROUPS {
        for (version, bytes) in csi_proxy_api::descriptors(group).unwrap() {
            let set = prost_types::FileDescriptorSet::decode(*bytes).unwrap();
            for method in set
                .file
                .iter()
                .flat_map(|f| &f.service)
                .flat_map(|s| &s.method)
            {
                let name = method.name();
                assert!(
                    classified(group, name),
                    "{group} {version} {name} is not classified"
                );
                blocking += usize::from(work_of(group, name).is_some());
            }
        }
    }
    assert!(blocking > 40, "{blocking}");
    assert!(!classified("disk", "Unheard"));
}

#[test]
fn the_caps_leave_most_of_the_blocking_pool_to_the_calls_that_cannot_hang() {
    for (i, cap) in CAPS.iter().enumerate() {
        assert_eq!(
            cap.work as usize, i,
            "{cap:?}: CAPS is in the order of Work"
        );
        assert!(cap.per_object <= cap.calls);
    }
    // tokio's blocking pool: 512 threads.
    const { assert!(HANGING_THREADS <= 512 / 4) };
}

#[test]
fn smb_calls_are_capped_per_share() {
    assert_eq!(smb_share(r"\\Srv\Share\sub\dir"), r"share \\srv\share");
    assert_eq!(smb_share("//srv/share"), r"share \\srv\share");
}

/// A kind runs at most its cap of calls at once; the next waits within its deadline, then
/// answers DEADLINE_EXCEEDED naming the cap (RESOURCE_EXHAUSTED without a deadline), counted;
/// a place given back admits the next at once.
#[tokio::test]
async fn past_its_kinds_cap_a_call_waits_then_is_refused_naming_the_cap() {
    let cap = CAPS[Work::Network as usize];
    let before = crate::metrics::refusals(Limit::AdmissionNetwork);
    let mut running = Vec::new();
    for i in 0..cap.calls {
        let object = Some(format!("portal 10.9.0.{i}:3260"));
        running.push(admit(DISCOVER, object, None).await.unwrap().unwrap());
    }
    let t = Instant::now();
    let e = admit(DISCOVER, Some("portal other:3260".into()), soon(100))
        .await
        .unwrap_err();
    assert!(t.elapsed() >= Duration::from_millis(100), "it waited");
    assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
    assert!(
        e.message()
            .starts_with("iscsi DiscoverTargetPortal on portal other:3260")
            && e.message()
                .contains("32 iSCSI discovery and login calls already run")
            && e.message().contains("admission_network"),
        "{}",
        e.message()
    );
    let e = admit_as(
        Work::Network,
        DISCOVER,
        None,
        None,
        Duration::from_millis(50),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("without a caller deadline"),
        "{}",
        e.message()
    );
    assert_eq!(
        crate::metrics::refusals(Limit::AdmissionNetwork),
        before + 2
    );
    // A waiter is admitted when a place is given back.
    let waiter = tokio::spawn(admit(DISCOVER, Some("portal late:3260".into()), soon(5000)));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiter.is_finished());
    running.pop();
    let late = waiter.await.unwrap().unwrap();
    drop(late);
    running.clear();
    assert!(
        places(Work::Network).objects.lock().unwrap().is_empty(),
        "objects forgotten"
    );
    // Calls that cannot hang take nothing.
    let mkdir = RpcId {
        group: "filesystem",
        version: "v1",
        method: "Mkdir",
        profile: "",
    };
    assert!(admit(mkdir, None, None).await.unwrap().is_none());
}

/// One object takes at most its share of a kind: the next call on it waits and is refused
/// naming the cap per object, while a call on another object is admitted at once.
#[tokio::test]
async fn one_object_takes_at_most_its_cap_and_others_are_admitted() {
    let stats = RpcId {
        group: "disk",
        version: "v1",
        method: "GetDiskStats",
        profile: "",
    };
    let cap = CAPS[Work::DeviceIo as usize];
    let on = |d: &str| Some(format!("disk {d}"));
    let mut held = Vec::new();
    for _ in 0..cap.per_object {
        held.push(admit(stats, on("7"), None).await.unwrap());
    }
    let e = admit(stats, on("7"), soon(50)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::DeadlineExceeded);
    assert!(
        e.message()
            .contains("4 disk and volume I/O calls already run on disk 7")
            && e.message().contains("per object"),
        "{}",
        e.message()
    );
    let t = Instant::now();
    drop(admit(stats, on("8"), soon(50)).await.unwrap());
    assert!(t.elapsed() < Duration::from_millis(50));
    held.clear();
    drop(admit(stats, on("7"), soon(50)).await.unwrap());
    assert!(places(Work::DeviceIo).objects.lock().unwrap().is_empty());
}

/// Past [`WAITING_PER_KIND`] waiters a call is refused at once; a waiter whose caller went away
/// (its future dropped) counts no more.
#[tokio::test]
async fn waiters_are_capped_and_a_caller_that_went_away_waits_no_more() {
    let mount = RpcId {
        group: "smb",
        version: "v1",
        method: "NewSmbGlobalMapping",
        profile: "",
    };
    let share = || Some(smb_share(r"\\dead\share"));
    let cap = CAPS[Work::Smb as usize];
    let mut held = Vec::new();
    for _ in 0..cap.per_object {
        held.push(admit(mount, share(), None).await.unwrap());
    }
    let waiters: Vec<_> = (0..WAITING_PER_KIND)
        .map(|_| tokio::spawn(admit(mount, share(), None)))
        .collect();
    while places(Work::Smb).waiting.load(Ordering::Acquire) < WAITING_PER_KIND {
        tokio::task::yield_now().await;
    }
    let t = Instant::now();
    let e = admit(mount, share(), None).await.unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert!(
        e.message().contains("2048 calls already wait"),
        "{}",
        e.message()
    );
    for w in &waiters {
        w.abort();
    }
    for w in waiters {
        let _ = w.await;
    }
    assert_eq!(places(Work::Smb).waiting.load(Ordering::Acquire), 0);
    held.clear();
    assert!(places(Work::Smb).objects.lock().unwrap().is_empty());
}
