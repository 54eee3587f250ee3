//! `bench validate` rejects doctored files and accepts the untouched one.

mod support;

use headroom_bench::prefill_schema::PrefillBenchFile;
use headroom_bench::validate::{validate_files, ValidateOptions};
use serde_json::Value;
use support::{bench, Fake};

fn good() -> PrefillBenchFile {
    bench(
        &mut Fake::honest(),
        "fallback:128,fallback:512,fused",
        &[256, 1024],
    )
}

fn check(files: &[Value]) -> Vec<String> {
    let named: Vec<(String, Vec<u8>)> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (format!("file{i}.json"), serde_json::to_vec(f).unwrap()))
        .collect();
    validate_files(&named, ValidateOptions::default()).1
}

fn value(f: &PrefillBenchFile) -> Value {
    serde_json::to_value(f).unwrap()
}

#[test]
fn the_untouched_file_is_valid() {
    let v = check(&[value(&good())]);
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn an_arm_relabelled_fails() {
    let mut f = value(&good());
    // The fallback:512 sample at 1024 claims to be fused: its recorded policy is not the arm's.
    let samples = f["samples"].as_array_mut().unwrap();
    let s = samples
        .iter_mut()
        .find(|s| s["arm"] == "fallback:512" && s["length"] == 1024)
        .unwrap();
    s["arm"] = "fused".into();
    let v = check(&[f]);
    assert!(v.iter().any(|m| m.contains("recorded control")), "{v:?}");
    assert!(
        v.iter()
            .any(|m| m.contains("arm fused reported route composed")),
        "{v:?}"
    );
    assert!(
        v.iter().any(|m| m.contains("has 0 samples at length 1024")),
        "{v:?}"
    );
}

#[test]
fn a_policy_field_removed_fails() {
    let mut f = value(&good());
    f["samples"][2]["attention"][0]["reported"]
        .as_object_mut()
        .unwrap()
        .remove("query_block");
    f["samples"][4]["attention"][0]["resolved"]
        .as_object_mut()
        .unwrap()
        .remove("source");
    let v = check(&[f]);
    assert!(
        v.iter()
            .any(|m| m.contains("samples[2]") && m.contains("query_block")),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|m| m.contains("samples[4]") && m.contains("source")),
        "{v:?}"
    );
}

#[test]
fn a_nan_or_an_unknown_field_fails() {
    let mut f = value(&good());
    // serde_json writes a NaN as null.
    f["samples"][1]["ttft_ms"]["median"] = Value::Null;
    f["samples"][3]["speedup"] = 2.into();
    let v = check(&[f]);
    assert!(v.iter().any(|m| m.contains("samples[1]")), "{v:?}");
    assert!(
        v.iter()
            .any(|m| m.contains("samples[3]") && m.contains("speedup")),
        "{v:?}"
    );
}

#[test]
fn mixed_hardware_fails() {
    let a = value(&good());
    let mut b = value(&good());
    b["hardware"]["cpu_cores"] = 999.into();
    let v = check(&[a, b]);
    assert!(v.iter().any(|m| m.contains("hardware differs")), "{v:?}");
}

#[test]
fn a_sample_from_another_build_fails() {
    let a = value(&good());
    let mut b = value(&good());
    b["build"]["git_commit"] = "0000000000000000000000000000000000000000".into();
    let v = check(&[a, b]);
    assert!(v.iter().any(|m| m.contains("build differs")), "{v:?}");
}

#[test]
fn too_few_iterations_and_wrong_schema_fail() {
    let mut f = value(&good());
    f["iterations"] = 2.into();
    let v = check(&[f]);
    assert!(
        v.iter().any(|m| m.contains("2 iterations, at least 3")),
        "{v:?}"
    );
    let mut g = value(&good());
    g["schema"] = "headroom.bench.prefill/0".into();
    let v = check(&[g]);
    assert!(v.iter().any(|m| m.contains("schema")), "{v:?}");
}

#[test]
fn every_violation_is_listed() {
    let mut f = value(&good());
    f["iterations"] = 1.into();
    f["samples"][0]["ttft_ms"]["median"] = Value::Null;
    f["samples"][5]["control"]["requested"] = "auto".into();
    let v = check(&[f]);
    assert!(v.len() >= 3, "{v:?}");
}

#[test]
fn the_json_schema_file_names_every_field() {
    // docs/schema/bench-prefill-1.schema.json lists exactly the fields the strict types write.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/schema/bench-prefill-1.schema.json"
    ))
    .unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    let f = value(&good());
    compare(&schema, &schema, &f, "$");
}

/// Every object in `data` has exactly the schema's `properties`, all `required`.
fn compare(root: &Value, schema: &Value, data: &Value, at: &str) {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.trim_start_matches("#/$defs/");
            &root["$defs"][name]
        }
        None => schema,
    };
    match data {
        Value::Object(obj) => {
            let props = schema["properties"]
                .as_object()
                .unwrap_or_else(|| panic!("{at}: no properties"));
            let required: Vec<&str> = schema["required"]
                .as_array()
                .unwrap_or_else(|| panic!("{at}: no required"))
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert_eq!(schema["additionalProperties"], Value::Bool(false), "{at}");
            for k in obj.keys() {
                assert!(props.contains_key(k), "{at}.{k} is not in the schema");
            }
            for k in props.keys() {
                if k == "device_name"
                    || k == "device_compute_units"
                    || k == "device_memory_gib"
                    || k == "compute_capability"
                    || k == "driver_version" && at.ends_with("hardware")
                {
                    continue;
                }
                assert!(
                    obj.contains_key(k),
                    "{at}.{k} is in the schema but not written"
                );
                assert!(required.contains(&k.as_str()), "{at}.{k} is not required");
            }
            for (k, v) in obj {
                compare(root, &props[k], v, &format!("{at}.{k}"));
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    compare(root, item, v, &format!("{at}[{i}]"));
                }
            }
        }
        _ => {}
    }
}
