//! Every RPC of every SMB, iSCSI and system version, called on the adapters directly (no
//! sockets) over recording fake hosts: conversions both ways, what the host receives, the exact
//! codes of invalid requests, secrets kept out of errors and `Debug`, and UNIMPLEMENTED from a
//! host that overrides nothing.

use csi_proxy_api::iscsi::v1alpha1::iscsi_server::Iscsi as _;
use csi_proxy_api::iscsi::v1alpha2 as iscsi_v1alpha2;
use csi_proxy_api::iscsi::v1alpha2::iscsi_server::Iscsi as _;
use csi_proxy_api::smb::v1::smb_server::Smb as _;
use csi_proxy_api::smb::v1alpha1::smb_server::Smb as _;
use csi_proxy_api::smb::v1beta1::smb_server::Smb as _;
use csi_proxy_api::smb::v1beta2::smb_server::Smb as _;
use csi_proxy_api::system::v1alpha1 as system_v1alpha1;
use csi_proxy_api::system::v1alpha1::system_server::System as _;
use csi_proxy_core::iscsi::{AuthType, Chap, IscsiService, Secret, TargetPortal};
use csi_proxy_core::smb::{SmbHost, SmbMapping, SmbService};
use csi_proxy_core::system::{ServiceInfo, ServiceStatus, StartType, SystemHost, SystemService};
use csi_proxy_core::testing::{PartialIscsiHost, PartialSmbHost, UnimplementedHost as Bare};
use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_server::iscsi::{IscsiV1alpha1, IscsiV1alpha2};
use csi_proxy_server::smb::{SmbV1, SmbV1alpha1, SmbV1beta1, SmbV1beta2};
use csi_proxy_server::system::SystemV1alpha1;
use std::sync::{Arc, Mutex};
use tonic::{Code, Request, Response, Status};

const PASSWORD: &str = "smb-Pa55word!";
const CHAP_SECRET: &str = "chap-S3cret-0123";
const MUTUAL_SECRET: &str = "mutual-S3cret-456";
const KUBELET: &str = "/var/lib/kubelet";

/// Asserts a failure with `code` whose message contains `needle` and no secret; returns it.
fn failed<T: std::fmt::Debug>(r: Result<Response<T>, Status>, code: Code, needle: &str) -> Status {
    let s = r.expect_err("expected a failure");
    assert_eq!(s.code(), code, "{s:?}");
    assert!(
        s.message().contains(needle),
        "{needle:?} not in {:?}",
        s.message()
    );
    for secret in [PASSWORD, CHAP_SECRET, MUTUAL_SECRET] {
        assert!(
            !s.message().contains(secret),
            "secret leaked: {:?}",
            s.message()
        );
    }
    s
}

fn ok<T>(r: Result<Response<T>, Status>) -> T {
    match r {
        Ok(resp) => resp.into_inner(),
        Err(s) => panic!("unexpected failure: {s:?}"),
    }
}

/// Expects `$code` with a message mentioning `$needle` from each `rpc(request)` on adapter `$a`.
macro_rules! all_fail {
    ($a:ident, $code:expr, $needle:expr, $($rpc:ident($req:expr)),+ $(,)?) => {
        $(failed($a.$rpc($req).await, $code, $needle);)+
    };
}

/// Expects UNIMPLEMENTED naming `$group Rpc` from each `Rpc => rpc(request)` on adapter `$a`.
macro_rules! all_unimplemented {
    ($a:ident, $group:literal, $($name:ident => $rpc:ident($req:expr)),+ $(,)?) => {
        $(failed($a.$rpc($req).await, Code::Unimplemented, concat!($group, " ", stringify!($name)));)+
    };
}

/// A fake host's memory: the calls it received, in order (each group's fake is a `Recorder` of
/// its own call enum, scripted in its host impl).
struct Recorder<C>(Mutex<Vec<C>>);

impl<C> Default for Recorder<C> {
    fn default() -> Self {
        Self(Mutex::new(Vec::new()))
    }
}

impl<C> Recorder<C> {
    fn record(&self, call: C) {
        self.0.lock().unwrap().push(call);
    }
    /// The calls so far, forgetting them.
    fn take(&self) -> Vec<C> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

// ---------------------------------------------------------------------------------------------
// SMB

#[derive(Debug, Clone, PartialEq, Eq)]
enum SmbCall {
    Map(SmbMapping),
    Link { remote: String, local: String },
    Remove(String),
}

/// Records every call; removing the root `\\gone\share` answers NotFound.
type FakeSmb = Recorder<SmbCall>;

impl PartialSmbHost for Recorder<SmbCall> {
    fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        self.record(SmbCall::Map(mapping.clone()));
        Ok(())
    }
    fn new_smb_link(&self, _: &SmbMapping, remote_path: &str, local_path: &str) -> Result<()> {
        self.record(SmbCall::Link {
            remote: remote_path.into(),
            local: local_path.into(),
        });
        Ok(())
    }
    fn remove_smb_global_mapping(&self, root: &str) -> Result<()> {
        self.record(SmbCall::Remove(root.into()));
        if root == "\\\\gone\\share" {
            return Err(Error::new(
                Kind::NotFound,
                "RemoveSmbGlobalMapping",
                root,
                "no such mapping",
            ));
        }
        Ok(())
    }
}

fn smb_service(host: Arc<dyn SmbHost>) -> SmbService {
    let fs = csi_proxy_core::testing::kubelet_fs();
    SmbService::new(host, fs, true)
}

/// Request builders of one SMB version, so tests read as tables.
macro_rules! smb_requests {
    ($m:ident, $v:ident) => {
        mod $m {
            use super::*;
            pub use csi_proxy_api::smb::$v as v;

            pub fn new(remote: &str, local: &str) -> Request<v::NewSmbGlobalMappingRequest> {
                Request::new(v::NewSmbGlobalMappingRequest {
                    remote_path: remote.into(),
                    local_path: local.into(),
                    username: "DOMAIN\\user".into(),
                    password: PASSWORD.into(),
                })
            }

            pub fn remove(remote: &str) -> Request<v::RemoveSmbGlobalMappingRequest> {
                Request::new(v::RemoveSmbGlobalMappingRequest {
                    remote_path: remote.into(),
                })
            }
        }
    };
}

smb_requests!(smb_v1alpha1_req, v1alpha1);
smb_requests!(smb_v1beta1_req, v1beta1);
smb_requests!(smb_v1beta2_req, v1beta2);
smb_requests!(smb_v1_req, v1);

/// One test per SMB version; `$error` names the legacy `error` field where there is one.
macro_rules! smb_version_test {
    ($test:ident, $adapter:ident, $req:ident $(, $error:ident)?) => {
        #[tokio::test]
        async fn $test() {
            use $req::{new, remove};
            let host = Arc::new(FakeSmb::default());
            let a = $adapter::new(smb_service(host.clone()));

            let local = format!("{KUBELET}/pods/p1/volumes/kubernetes.io~csi/v1/mount");
            let _resp = ok(a.new_smb_global_mapping(new("//FileSrv/Share1/sub/dir", &local)).await);
            $(assert_eq!(_resp.$error, "");)?
            let calls = host.take();
            let SmbCall::Map(m) = &calls[0] else { panic!("{calls:?}") };
            assert_eq!(m.root, "\\\\filesrv\\share1");
            assert!(m.require_privacy);
            let creds = m.credentials.as_ref().expect("credentials with a user name");
            assert_eq!((creds.username.as_str(), creds.password.expose()), ("DOMAIN\\user", PASSWORD));
            assert!(!format!("{calls:?}").contains(PASSWORD), "Debug of host arguments leaks");
            assert_eq!(calls[1], SmbCall::Link {
                remote: "\\\\FileSrv\\Share1\\sub\\dir".into(),
                local: local.clone(),
            });
            assert_eq!(calls.len(), 2);

            // No user: the host's own credentials; no local path: no link.
            let mut anonymous = new("\\\\FileSrv\\Share1", "");
            anonymous.get_mut().username.clear();
            ok(a.new_smb_global_mapping(anonymous).await);
            let calls = host.take();
            assert!(matches!(&calls[..], [SmbCall::Map(m)] if m.credentials.is_none()), "{calls:?}");

            let _resp = ok(a.remove_smb_global_mapping(remove("\\\\FileSrv\\SHARE1\\sub")).await);
            $(assert_eq!(_resp.$error, "");)?
            assert_eq!(host.take(), [SmbCall::Remove("\\\\filesrv\\share1".into())]);
            failed(a.remove_smb_global_mapping(remove("\\\\Gone\\Share")).await, Code::NotFound, "no such mapping");
            host.take();

            all_fail!(a, Code::InvalidArgument, "remote path is empty",
                new_smb_global_mapping(new("", "")),
                remove_smb_global_mapping(remove("")),
            );
            all_fail!(a, Code::InvalidArgument, "remote path \"hostname\" is invalid",
                new_smb_global_mapping(new("hostname", "")),
                remove_smb_global_mapping(remove("hostname")),
            );
            all_fail!(a, Code::PermissionDenied, "/etc/evil",
                new_smb_global_mapping(new("\\\\srv\\share", "/etc/evil")),
            );
            assert_eq!(host.take(), [], "invalid requests reached the host");
        }
    };
}

smb_version_test!(smb_v1alpha1_every_rpc, SmbV1alpha1, smb_v1alpha1_req, error);
smb_version_test!(smb_v1beta1_every_rpc, SmbV1beta1, smb_v1beta1_req, error);
smb_version_test!(smb_v1beta2_every_rpc, SmbV1beta2, smb_v1beta2_req);
smb_version_test!(smb_v1_every_rpc, SmbV1, smb_v1_req);

#[test]
fn smb_requests_redact_the_password_in_debug() {
    let req = csi_proxy_core::smb::NewSmbGlobalMappingRequest {
        remote_path: "\\\\srv\\share".into(),
        local_path: String::new(),
        username: "user".into(),
        password: PASSWORD.into(),
    };
    let shown = format!("{req:?} {req:#?}");
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(shown.contains("srv") && shown.contains("user"), "{shown}");
}

// ---------------------------------------------------------------------------------------------
// iSCSI

#[derive(Debug, Clone, PartialEq, Eq)]
enum IscsiCall {
    Add(TargetPortal),
    Discover(TargetPortal),
    Remove(TargetPortal),
    List,
    Connect(TargetPortal, String, Chap),
    Disconnect(TargetPortal, String),
    Disks(TargetPortal, String),
    MutualSecret(String),
}

/// Records every call; answers with scripted IQNs, portals and disks. The portal
/// `unknown:3260` is NotFound.
type FakeIscsi = Recorder<IscsiCall>;

const IQN: &str = "iqn.1991-05.com.microsoft:target-1";

fn portal(address: &str, port: u16) -> TargetPortal {
    TargetPortal {
        address: address.into(),
        port,
    }
}

impl PartialIscsiHost for Recorder<IscsiCall> {
    fn add_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        self.record(IscsiCall::Add(portal.clone()));
        Ok(())
    }
    fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>> {
        self.record(IscsiCall::Discover(portal.clone()));
        if portal.address == "unknown" {
            return Err(Error::new(
                Kind::NotFound,
                "DiscoverTargetPortal",
                portal,
                "no such portal",
            ));
        }
        Ok(vec![IQN.into(), "iqn.x:2".into()])
    }
    fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        self.record(IscsiCall::Remove(portal.clone()));
        Ok(())
    }
    fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        self.record(IscsiCall::List);
        Ok(vec![portal("10.0.0.5", 3260), portal("fe80::1", 3261)])
    }
    fn connect_target(&self, portal: &TargetPortal, iqn: &str, chap: &Chap) -> Result<()> {
        self.record(IscsiCall::Connect(portal.clone(), iqn.into(), chap.clone()));
        Ok(())
    }
    fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()> {
        self.record(IscsiCall::Disconnect(portal.clone(), iqn.into()));
        Ok(())
    }
    fn get_target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>> {
        self.record(IscsiCall::Disks(portal.clone(), iqn.into()));
        Ok(vec![3, 17])
    }
    fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()> {
        self.record(IscsiCall::MutualSecret(secret.expose().into()));
        Ok(())
    }
}

/// Request builders of one iSCSI version, so tests read as tables.
macro_rules! iscsi_requests {
    ($m:ident, $v:ident) => {
        mod $m {
            use super::*;
            use csi_proxy_api::iscsi::$v as v;
            type Portal = Option<v::TargetPortal>;

            pub fn wire(address: &str, port: u32) -> Portal {
                Some(v::TargetPortal {
                    target_address: address.into(),
                    target_port: port,
                })
            }
            /// The usual portal, with port 0 for the default.
            pub fn portal_0() -> Portal {
                wire("10.0.0.5", 0)
            }
            pub fn add(target_portal: Portal) -> Request<v::AddTargetPortalRequest> {
                Request::new(v::AddTargetPortalRequest { target_portal })
            }
            pub fn discover(target_portal: Portal) -> Request<v::DiscoverTargetPortalRequest> {
                Request::new(v::DiscoverTargetPortalRequest { target_portal })
            }
            pub fn remove(target_portal: Portal) -> Request<v::RemoveTargetPortalRequest> {
                Request::new(v::RemoveTargetPortalRequest { target_portal })
            }
            pub fn list() -> Request<v::ListTargetPortalsRequest> {
                Request::new(v::ListTargetPortalsRequest {})
            }
            pub fn connect(
                target_portal: Portal,
                iqn: &str,
                auth_type: i32,
            ) -> Request<v::ConnectTargetRequest> {
                Request::new(v::ConnectTargetRequest {
                    target_portal,
                    iqn: iqn.into(),
                    auth_type,
                    chap_username: "chap-user".into(),
                    chap_secret: CHAP_SECRET.into(),
                })
            }
            pub fn disconnect(
                target_portal: Portal,
                iqn: &str,
            ) -> Request<v::DisconnectTargetRequest> {
                Request::new(v::DisconnectTargetRequest {
                    target_portal,
                    iqn: iqn.into(),
                })
            }
            pub fn disks(target_portal: Portal, iqn: &str) -> Request<v::GetTargetDisksRequest> {
                Request::new(v::GetTargetDisksRequest {
                    target_portal,
                    iqn: iqn.into(),
                })
            }
        }
    };
}

iscsi_requests!(iscsi_v1alpha1_req, v1alpha1);
iscsi_requests!(iscsi_v1alpha2_req, v1alpha2);

/// The RPCs v1alpha1 and v1alpha2 share, for one version.
macro_rules! iscsi_version_test {
    ($test:ident, $adapter:ident, $req:ident) => {
        #[tokio::test]
        async fn $test() {
            use $req::*;
            let host = Arc::new(FakeIscsi::default());
            let a = $adapter::new(IscsiService::new(host.clone()));

            ok(a.add_target_portal(add(portal_0())).await);
            let found = ok(a
                .discover_target_portal(discover(wire("10.0.0.5", 3260)))
                .await);
            assert_eq!(found.iqns, [IQN, "iqn.x:2"]);
            ok(a.remove_target_portal(remove(wire("10.0.0.5", 3261))).await);
            let listed = ok(a.list_target_portals(list()).await).target_portals;
            assert_eq!(
                listed,
                [
                    wire("10.0.0.5", 3260).unwrap(),
                    wire("fe80::1", 3261).unwrap()
                ]
            );
            ok(
                a.connect_target(connect(portal_0(), IQN, AuthType::OneWayChap as i32))
                    .await,
            );
            ok(a.connect_target(connect(portal_0(), IQN, 0)).await);
            ok(a.disconnect_target(disconnect(portal_0(), IQN)).await);
            assert_eq!(
                ok(a.get_target_disks(disks(portal_0(), IQN)).await).disk_i_ds,
                ["3", "17"]
            );

            let chap = |auth_type| Chap {
                auth_type,
                username: "chap-user".into(),
                secret: CHAP_SECRET.into(),
            };
            let p = portal("10.0.0.5", 3260);
            let calls = host.take();
            assert_eq!(
                calls,
                [
                    // AddTargetPortal counts the registered portals first (the portal cap).
                    IscsiCall::List,
                    IscsiCall::Add(p.clone()),
                    IscsiCall::Discover(p.clone()),
                    IscsiCall::Remove(portal("10.0.0.5", 3261)),
                    IscsiCall::List,
                    IscsiCall::Connect(p.clone(), IQN.into(), chap(AuthType::OneWayChap)),
                    IscsiCall::Connect(p.clone(), IQN.into(), chap(AuthType::None)),
                    // DisconnectTarget looks at the session's disks before logging out.
                    IscsiCall::Disks(p.clone(), IQN.into()),
                    IscsiCall::Disconnect(p.clone(), IQN.into()),
                    IscsiCall::Disks(p.clone(), IQN.into()),
                ]
            );
            assert!(
                !format!("{calls:?}").contains(CHAP_SECRET),
                "Debug of host arguments leaks"
            );

            failed(
                a.discover_target_portal(discover(wire("unknown", 0))).await,
                Code::NotFound,
                "no such portal",
            );
            host.take();

            // Upstream crashed the whole daemon on each of these.
            all_fail!(
                a,
                Code::InvalidArgument,
                "target_portal is missing",
                add_target_portal(add(None)),
                discover_target_portal(discover(None)),
                remove_target_portal(remove(None)),
                connect_target(connect(None, IQN, 1)),
                disconnect_target(disconnect(None, IQN)),
                get_target_disks(disks(None, IQN)),
            );
            all_fail!(
                a,
                Code::InvalidArgument,
                "70000",
                add_target_portal(add(wire("10.0.0.5", 70000))),
                connect_target(connect(wire("10.0.0.5", 70000), IQN, 1)),
            );
            all_fail!(
                a,
                Code::InvalidArgument,
                "target_address is empty",
                add_target_portal(add(wire("", 3260))),
            );
            all_fail!(
                a,
                Code::InvalidArgument,
                "invalid authentication type authType=7",
                connect_target(connect(portal_0(), IQN, 7)),
            );
            all_fail!(
                a,
                Code::InvalidArgument,
                "iqn is empty",
                connect_target(connect(portal_0(), "", 1)),
                disconnect_target(disconnect(portal_0(), "")),
                get_target_disks(disks(portal_0(), "")),
            );
            assert_eq!(host.take(), [], "invalid requests reached the host");
        }
    };
}

iscsi_version_test!(iscsi_v1alpha1_every_rpc, IscsiV1alpha1, iscsi_v1alpha1_req);
iscsi_version_test!(iscsi_v1alpha2_every_rpc, IscsiV1alpha2, iscsi_v1alpha2_req);

fn mutual_secret() -> Request<iscsi_v1alpha2::SetMutualChapSecretRequest> {
    Request::new(iscsi_v1alpha2::SetMutualChapSecretRequest {
        mutual_chap_secret: MUTUAL_SECRET.into(),
    })
}

#[tokio::test]
async fn iscsi_v1alpha2_sets_the_mutual_chap_secret() {
    let host = Arc::new(FakeIscsi::default());
    let a = IscsiV1alpha2::new(IscsiService::new(host.clone()));
    ok(a.set_mutual_chap_secret(mutual_secret()).await);
    assert_eq!(host.take(), [IscsiCall::MutualSecret(MUTUAL_SECRET.into())]);
}

#[test]
fn iscsi_requests_redact_chap_secrets_in_debug() {
    let req = csi_proxy_core::iscsi::ConnectTargetRequest {
        target_portal: None,
        iqn: IQN.into(),
        auth_type: 2,
        chap_username: "chap-user".into(),
        chap_secret: CHAP_SECRET.into(),
    };
    let chap = Chap {
        auth_type: AuthType::MutualChap,
        username: "chap-user".into(),
        secret: CHAP_SECRET.into(),
    };
    let shown = format!("{req:?} {req:#?} {chap:?} {chap:#?}");
    assert!(!shown.contains(CHAP_SECRET), "{shown}");
    assert!(
        shown.contains(IQN) && shown.contains("chap-user"),
        "{shown}"
    );
}

// ---------------------------------------------------------------------------------------------
// System

#[derive(Debug, PartialEq, Eq)]
enum SystemCall {
    Serial,
    Get(String),
    Start(String),
    Stop(String, bool),
}

/// Records every call; a padded serial, `w32time` as the only service.
type FakeSystem = Recorder<SystemCall>;

impl SystemHost for Recorder<SystemCall> {
    fn bios_serial_number(&self) -> Result<String> {
        self.record(SystemCall::Serial);
        Ok("  VMware-42 1a 2b  \n".into())
    }
    fn get_service(&self, name: &str) -> Result<ServiceInfo> {
        self.record(SystemCall::Get(name.into()));
        if name != "w32time" {
            return Err(Error::new(
                Kind::NotFound,
                "GetService",
                name,
                "no such service",
            ));
        }
        Ok(ServiceInfo {
            display_name: "Windows Time".into(),
            start_type: StartType::Manual,
            status: ServiceStatus::Running,
        })
    }
    fn start_service(&self, name: &str) -> Result<()> {
        self.record(SystemCall::Start(name.into()));
        Ok(())
    }
    fn stop_service(&self, name: &str, force: bool) -> Result<()> {
        self.record(SystemCall::Stop(name.into(), force));
        Ok(())
    }
}

/// System request builders.
mod sys {
    use super::*;
    pub use csi_proxy_api::system::v1alpha1 as v;

    pub fn serial() -> Request<v::GetBiosSerialNumberRequest> {
        Request::new(v::GetBiosSerialNumberRequest {})
    }
    pub fn get(name: &str) -> Request<v::GetServiceRequest> {
        Request::new(v::GetServiceRequest { name: name.into() })
    }
    pub fn start(name: &str) -> Request<v::StartServiceRequest> {
        Request::new(v::StartServiceRequest { name: name.into() })
    }
    pub fn stop(name: &str, force: bool) -> Request<v::StopServiceRequest> {
        Request::new(v::StopServiceRequest {
            name: name.into(),
            force,
        })
    }
}

#[tokio::test]
async fn system_v1alpha1_every_rpc() {
    use sys::*;
    let host = Arc::new(FakeSystem::default());
    let a = SystemV1alpha1::new(SystemService::new(host.clone()));
    assert_eq!(
        ok(a.get_bios_serial_number(serial()).await).serial_number,
        "VMware-42 1a 2b"
    );
    let svc = ok(a.get_service(get("w32time")).await);
    assert_eq!(svc.display_name, "Windows Time");
    assert_eq!(svc.start_type, v::StartType::Manual as i32);
    assert_eq!(svc.status, v::ServiceStatus::Running as i32);
    ok(a.start_service(start("w32time")).await);
    ok(a.stop_service(stop("w32time", true)).await);
    ok(a.stop_service(stop("w32time", false)).await);
    failed(
        a.get_service(get("nope")).await,
        Code::NotFound,
        "no such service",
    );
    all_fail!(
        a,
        Code::InvalidArgument,
        "service name is empty",
        get_service(get("")),
        start_service(start("")),
        stop_service(stop("", true)),
    );
    let name = |n: &str| n.to_string();
    assert_eq!(
        host.take(),
        [
            SystemCall::Serial,
            SystemCall::Get(name("w32time")),
            SystemCall::Start(name("w32time")),
            SystemCall::Stop(name("w32time"), true),
            SystemCall::Stop(name("w32time"), false),
            SystemCall::Get(name("nope")),
        ]
    );
}

/// Asserts that core enum `$core` has each listed variant with the same number as the
/// generated enum `$wire`.
macro_rules! same_numbers {
    ($core:ident, $wire:ty: $($variant:ident),+ $(,)?) => {
        $(assert_eq!($core::$variant as i32, <$wire>::$variant as i32, stringify!($core::$variant));)+
    };
}

#[test]
fn core_enums_have_the_wire_numbers() {
    same_numbers!(ServiceStatus, system_v1alpha1::ServiceStatus:
        Unknown, Stopped, StartPending, StopPending, Running, ContinuePending, PausePending, Paused);
    same_numbers!(StartType, system_v1alpha1::StartType: Boot, System, Automatic, Manual, Disabled);
    same_numbers!(AuthType, iscsi_v1alpha2::AuthenticationType: None, OneWayChap, MutualChap);
}

// ---------------------------------------------------------------------------------------------
// A host that implements nothing (`Bare`)

/// Every SMB RPC of one version against [`Bare`].
macro_rules! smb_unimplemented {
    ($adapter:ident, $req:ident) => {{
        use $req::*;
        let a = $adapter::new(smb_service(Arc::new(Bare)));
        all_unimplemented!(a, "smb",
            NewSmbGlobalMapping => new_smb_global_mapping(new("\\\\srv\\share", "")),
            RemoveSmbGlobalMapping => remove_smb_global_mapping(remove("\\\\srv\\share")),
        );
    }};
}

/// Every iSCSI RPC v1alpha1 and v1alpha2 share, for one version, against [`Bare`].
macro_rules! iscsi_unimplemented {
    ($adapter:ident, $req:ident) => {{
        use $req::*;
        let a = $adapter::new(IscsiService::new(Arc::new(Bare)));
        all_unimplemented!(a, "iscsi",
            AddTargetPortal => add_target_portal(add(portal_0())),
            DiscoverTargetPortal => discover_target_portal(discover(portal_0())),
            RemoveTargetPortal => remove_target_portal(remove(portal_0())),
            ListTargetPortals => list_target_portals(list()),
            ConnectTarget => connect_target(connect(portal_0(), IQN, 2)),
            DisconnectTarget => disconnect_target(disconnect(portal_0(), IQN)),
            GetTargetDisks => get_target_disks(disks(portal_0(), IQN)),
        );
    }};
}

#[tokio::test]
async fn hosts_without_overrides_answer_unimplemented_naming_group_and_rpc() {
    smb_unimplemented!(SmbV1alpha1, smb_v1alpha1_req);
    smb_unimplemented!(SmbV1beta1, smb_v1beta1_req);
    smb_unimplemented!(SmbV1beta2, smb_v1beta2_req);
    smb_unimplemented!(SmbV1, smb_v1_req);

    iscsi_unimplemented!(IscsiV1alpha1, iscsi_v1alpha1_req);
    iscsi_unimplemented!(IscsiV1alpha2, iscsi_v1alpha2_req);
    let a = IscsiV1alpha2::new(IscsiService::new(Arc::new(Bare)));
    all_unimplemented!(a, "iscsi", SetMutualChapSecret => set_mutual_chap_secret(mutual_secret()));

    use sys::*;
    let a = SystemV1alpha1::new(SystemService::new(Arc::new(Bare)));
    all_unimplemented!(a, "system",
        GetBIOSSerialNumber => get_bios_serial_number(serial()),
        GetService => get_service(get("svc")),
        StartService => start_service(start("svc")),
        StopService => stop_service(stop("svc", true)),
    );
}
