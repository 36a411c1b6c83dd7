//! Joint-graph validation through the library: the named errors, and answers
//! that do not depend on the order of the nodes in the file.

use remat::joint::{self, OperatorGraph, OperatorGraphError};

fn fixture_value(name: &str) -> serde_json::Value {
    let path = format!("{}/tests/data/joint/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn node_order_in_the_file_does_not_change_the_answer() {
    for name in ["sum_cos_cos", "mlp_block", "attention_block"] {
        let value = fixture_value(name);
        let forward = joint::partition_json(&value.to_string(), None).unwrap();
        let mut reversed = value.clone();
        reversed["nodes"].as_array_mut().unwrap().reverse();
        let backward = joint::partition_json(&reversed.to_string(), None).unwrap();
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        assert_eq!(sorted(forward.chosen.saved.clone()), sorted(backward.chosen.saved.clone()), "{name}");
        assert_eq!(forward.chosen.traffic_bytes, backward.chosen.traffic_bytes, "{name}");
        assert_eq!(forward.chosen.saved_bytes, backward.chosen.saved_bytes, "{name}");
    }
}

#[test]
fn errors_are_named() {
    let err = |text: &str| OperatorGraph::from_json(text).unwrap_err();
    assert_eq!(err(r#"{"nodes": []}"#), OperatorGraphError::Empty);
    match err(r#"{"nodes": [{"name": "x", "role": "primal", "bytes": -1}]}"#) {
        OperatorGraphError::Json { path, .. } => assert_eq!(path, "nodes[0].bytes"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err(r#"{"nodes": [{"name": "x", "role": "primal", "shape": [2], "dtype": "float4"}]}"#),
        OperatorGraphError::UnknownDtype { node: "x".into(), dtype: "float4".into() }
    );
    assert_eq!(
        err(r#"{"nodes": [{"name": "x", "role": "primal", "shape": [4294967296, 4294967296], "dtype": "float32"}]}"#),
        OperatorGraphError::SizeOverflow { node: "x".into() }
    );
    assert_eq!(
        err(r#"{"nodes": [{"name": "x", "role": "primal", "bytes": 4, "inputs": ["x"]}]}"#),
        OperatorGraphError::InputWithInputs { node: "x".into(), role: "primal" }
    );
    let nodes = r#"[{"name": "x", "role": "primal", "bytes": 4},
        {"name": "t", "role": "forward", "op": "pointwise", "inputs": ["x"], "bytes": 4, "flops": -1}]"#;
    assert_eq!(
        err(&format!(r#"{{"nodes": {nodes}, "gradients": ["t"]}}"#)),
        OperatorGraphError::InvalidFlops { node: "t".into(), value: -1.0 }
    );
    let nodes = r#"[{"name": "x", "role": "primal", "bytes": 4},
        {"name": "g", "role": "tangent", "bytes": 4},
        {"name": "dx", "role": "backward", "op": "pointwise", "inputs": ["g"], "bytes": 4}]"#;
    assert_eq!(
        err(&format!(r#"{{"nodes": {nodes}, "outputs": ["dx"], "gradients": ["dx"]}}"#)),
        OperatorGraphError::OutputNotForward { name: "dx".into(), role: "backward" }
    );
    assert_eq!(
        err(&format!(r#"{{"nodes": {nodes}, "gradients": ["dy"]}}"#)),
        OperatorGraphError::UnknownOutput { field: "gradients", name: "dy".into() }
    );
    let nodes = r#"[{"name": "x", "role": "primal", "bytes": 4},
        {"name": "tup", "role": "forward", "op": "other", "inputs": ["x"], "tuple": true},
        {"name": "y", "role": "forward", "op": "pointwise", "inputs": ["tup"], "bytes": 4}]"#;
    assert_eq!(
        err(&format!(r#"{{"nodes": {nodes}, "gradients": ["y"]}}"#)),
        OperatorGraphError::TupleUse { node: "tup".into(), user: "y".into() }
    );
}
