//! The compiled descriptors of every group-version must match the wire contract facts kept in
//! `tests/data/wire-contract.json`: packages, services, methods with their input/output types,
//! every field (name, number, type, repeated, map key/value types) and every enum value.
//! Any drift fails with a message naming the group-version and the element.

use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

fn contract() -> serde_json::Map<String, Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/wire-contract.json"
    );
    let text = std::fs::read_to_string(path).expect("read wire-contract.json");
    match serde_json::from_str(&text).expect("parse wire-contract.json") {
        Value::Object(m) => m,
        other => panic!("contract is not an object: {other}"),
    }
}

fn compiled(group: &str, version: &str) -> FileDescriptorProto {
    let (_, bytes) = csi_proxy_api::descriptors(group)
        .unwrap_or_else(|| panic!("{group}: no such group compiled"))
        .iter()
        .find(|(v, _)| *v == version)
        .unwrap_or_else(|| panic!("{group}/{version}: not compiled"));
    let set = FileDescriptorSet::decode(*bytes).expect("decode descriptor set");
    assert_eq!(set.file.len(), 1, "{group}/{version}: one file expected");
    set.file.into_iter().next().unwrap()
}

/// The contract's spelling of a field type, built from the compiled descriptor.
fn type_name(pkg: &str, msg: &DescriptorProto, f: &prost_types::FieldDescriptorProto) -> String {
    let t = f.r#type();
    let scalar = |t: Type| -> Option<&'static str> {
        Some(match t {
            Type::Double => "double",
            Type::Float => "float",
            Type::Int64 => "int64",
            Type::Uint64 => "uint64",
            Type::Int32 => "int32",
            Type::Fixed64 => "fixed64",
            Type::Fixed32 => "fixed32",
            Type::Bool => "bool",
            Type::String => "string",
            Type::Bytes => "bytes",
            Type::Uint32 => "uint32",
            Type::Sfixed32 => "sfixed32",
            Type::Sfixed64 => "sfixed64",
            Type::Sint32 => "sint32",
            Type::Sint64 => "sint64",
            _ => return None,
        })
    };
    let referenced = |name: &str| name.trim_start_matches('.').to_string();
    if let Some(s) = scalar(t) {
        return s.to_string();
    }
    let full = referenced(f.type_name());
    // A map field is a repeated reference to a nested `<Name>Entry` with map_entry set.
    let nested = full
        .strip_prefix(&format!("{pkg}.{}.", msg.name()))
        .and_then(|entry| {
            msg.nested_type
                .iter()
                .find(|n| n.name() == entry && n.options.as_ref().is_some_and(|o| o.map_entry()))
        });
    if let Some(entry) = nested {
        let k = &entry.field[0];
        let v = &entry.field[1];
        let kt = scalar(k.r#type())
            .map(str::to_string)
            .unwrap_or_else(|| referenced(k.type_name()));
        let vt = scalar(v.r#type())
            .map(str::to_string)
            .unwrap_or_else(|| referenced(v.type_name()));
        return format!("map<{kt},{vt}>");
    }
    full
}

/// Every difference between the compiled descriptors and `contract`, one line each.
fn drift(contract: &serde_json::Map<String, Value>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    for (gv, facts) in contract {
        let (group, version) = gv.split_once('/').expect("group/version key");
        seen.insert(gv.clone());
        let Some(file) = csi_proxy_api::descriptors(group)
            .and_then(|d| d.iter().find(|(v, _)| *v == version))
            .map(|_| compiled(group, version))
        else {
            problems.push(format!("{gv}: not compiled"));
            continue;
        };
        let pkg = facts["package"].as_str().unwrap();
        if file.package() != pkg {
            problems.push(format!(
                "{gv}: package {:?}, contract {pkg:?}",
                file.package()
            ));
        }

        // Services and methods, both directions.
        let mut want_methods = BTreeMap::new();
        for (svc, rpcs) in facts["services"].as_object().unwrap() {
            for (rpc, io) in rpcs.as_object().unwrap() {
                want_methods.insert(
                    format!("{svc}/{rpc}"),
                    (
                        io["input"].as_str().unwrap().to_string(),
                        io["output"].as_str().unwrap().to_string(),
                    ),
                );
            }
        }
        let mut got_methods = BTreeMap::new();
        for svc in &file.service {
            for m in &svc.method {
                got_methods.insert(
                    format!("{pkg}.{}/{}", svc.name(), m.name()),
                    (
                        m.input_type().trim_start_matches('.').to_string(),
                        m.output_type().trim_start_matches('.').to_string(),
                    ),
                );
            }
        }
        for (k, v) in &want_methods {
            match got_methods.get(k) {
                None => problems.push(format!("{gv}: method {k} missing")),
                Some(g) if g != v => {
                    problems.push(format!("{gv}: method {k} is {g:?}, contract {v:?}"))
                }
                _ => {}
            }
        }
        for k in got_methods
            .keys()
            .filter(|k| !want_methods.contains_key(*k))
        {
            problems.push(format!("{gv}: method {k} is not in the contract"));
        }

        // Messages and fields, both directions.
        let want_msgs = facts["messages"].as_object().unwrap();
        let got_msgs: BTreeMap<String, &DescriptorProto> = file
            .message_type
            .iter()
            .map(|m| (format!("{pkg}.{}", m.name()), m))
            .collect();
        for (name, fields) in want_msgs {
            let Some(msg) = got_msgs.get(name) else {
                problems.push(format!("{gv}: message {name} missing"));
                continue;
            };
            let want: BTreeMap<i64, &Value> = fields
                .as_array()
                .unwrap()
                .iter()
                .map(|f| (f["number"].as_i64().unwrap(), f))
                .collect();
            for f in &msg.field {
                let num = i64::from(f.number());
                let Some(w) = want.get(&num) else {
                    problems.push(format!(
                        "{gv}: field {name}.{} = {num} is not in the contract",
                        f.name()
                    ));
                    continue;
                };
                let wname = w["name"].as_str().unwrap();
                if f.name() != wname {
                    problems.push(format!(
                        "{gv}: field {name} #{num} is named {:?}, contract {wname:?}",
                        f.name()
                    ));
                }
                let wtype = w["type"].as_str().unwrap();
                let gtype = type_name(pkg, msg, f);
                if gtype != wtype {
                    problems.push(format!(
                        "{gv}: field {name}.{wname} has type {gtype}, contract {wtype}"
                    ));
                }
                let is_map = wtype.starts_with("map<");
                let want_repeated = w.get("repeated").and_then(Value::as_bool).unwrap_or(false);
                let got_repeated = f.label() == Label::Repeated && !is_map;
                if want_repeated != got_repeated {
                    problems.push(format!(
                        "{gv}: field {name}.{wname} repeated={got_repeated}, contract repeated={want_repeated}"
                    ));
                }
            }
            for (num, w) in &want {
                if !msg.field.iter().any(|f| i64::from(f.number()) == *num) {
                    problems.push(format!("{gv}: field {name}.{} = {num} missing", w["name"]));
                }
            }
        }
        for name in got_msgs.keys().filter(|k| !want_msgs.contains_key(*k)) {
            problems.push(format!("{gv}: message {name} is not in the contract"));
        }

        // Enums and their numbers, both directions.
        let want_enums = facts["enums"].as_object().unwrap();
        for (name, values) in want_enums {
            let Some(e) = file
                .enum_type
                .iter()
                .find(|e| format!("{pkg}.{}", e.name()) == *name)
            else {
                problems.push(format!("{gv}: enum {name} missing"));
                continue;
            };
            let want: BTreeMap<&str, i64> = values
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_i64().unwrap()))
                .collect();
            let got: BTreeMap<&str, i64> = e
                .value
                .iter()
                .map(|v| (v.name(), i64::from(v.number())))
                .collect();
            if want != got {
                problems.push(format!(
                    "{gv}: enum {name} values {got:?}, contract {want:?}"
                ));
            }
        }
        for e in &file.enum_type {
            let full = format!("{pkg}.{}", e.name());
            if !want_enums.contains_key(&full) {
                problems.push(format!("{gv}: enum {full} is not in the contract"));
            }
        }
    }

    // Every compiled group-version is in the contract and vice versa.
    for group in csi_proxy_api::GROUPS {
        for version in csi_proxy_api::versions(group).unwrap() {
            if !seen.contains(&format!("{group}/{version}")) {
                problems.push(format!(
                    "{group}/{version}: compiled but not in the contract"
                ));
            }
        }
    }
    problems
}

#[test]
fn every_group_version_matches_the_wire_contract() {
    let contract = contract();
    assert_eq!(contract.len(), 23, "the contract has 23 group-versions");
    let problems = drift(&contract);
    assert!(
        problems.is_empty(),
        "wire contract drift:\n{}",
        problems.join("\n")
    );
}

#[test]
fn drift_is_reported_with_group_version_and_field() {
    // The comparison must be able to fail: doctored facts are each reported by name.
    let mut contract = contract();
    let disk = contract.get_mut("disk/v1").unwrap();
    disk["messages"]["v1.GetDiskStatsRequest"][0]["number"] = Value::from(2);
    disk["messages"]["v1.DiskIDs"][1]["name"] = Value::from("serial");
    let volume = contract.get_mut("volume/v1beta1").unwrap();
    volume["messages"]["v1beta1.VolumeStatsResponse"][0]["type"] = Value::from("uint64");
    let system = contract.get_mut("system/v1alpha1").unwrap();
    system["enums"]["v1alpha1.StartType"]["MANUAL"] = Value::from(9);
    let problems = drift(&contract).join("\n");
    for needle in [
        "disk/v1: field v1.GetDiskStatsRequest.disk_number = 1 is not in the contract",
        "disk/v1: field v1.DiskIDs #2 is named \"serial_number\", contract \"serial\"",
        "volume/v1beta1: field v1beta1.VolumeStatsResponse.volumeSize has type int64, contract uint64",
        "system/v1alpha1: enum v1alpha1.StartType values",
    ] {
        assert!(
            problems.contains(needle),
            "missing {needle:?} in:\n{problems}"
        );
    }
}

#[test]
fn method_count_is_139() {
    let n: usize = contract()
        .values()
        .map(|f| {
            f["services"]
                .as_object()
                .unwrap()
                .values()
                .map(|s| s.as_object().unwrap().len())
                .sum::<usize>()
        })
        .sum();
    assert_eq!(n, 139);
}
