//! Compact JSON for generated files: one stage (or node) per line, fields that
//! equal their defaults left out, metadata last. Readable by `Chain::from_json`
//! and by the forward-graph reader.

use crate::chain::{Chain, Stage};

use crate::graph::ForwardGraph;

fn value<T: serde::Serialize + ?Sized>(x: &T) -> String {
    serde_json::to_string(x).expect("plain values serialize")
}

/// The fields of a stage in the chain format's order, defaults left out.
fn stage_fields(s: &Stage, out: &mut Vec<(&'static str, String)>) {
    out.push(("forward_time", value(&s.forward_time)));
    out.push(("backward_time", value(&s.backward_time)));
    out.push(("output_size", value(&s.output_size)));
    out.push(("saved_size", value(&s.saved_size)));
    if s.gradient_size != s.output_size {
        out.push(("gradient_size", value(&s.gradient_size)));
    }
    if s.forward_overhead != 0 {
        out.push(("forward_overhead", value(&s.forward_overhead)));
    }
    if s.backward_overhead != 0 {
        out.push(("backward_overhead", value(&s.backward_overhead)));
    }
    if s.backward_frees != 0 {
        out.push(("backward_frees", value(&s.backward_frees)));
    }
    if !s.options.is_empty() {
        // Each option's overheads are written out: a reader defaults them to the stage's.
        out.push(("options", value(&s.options)));
    }
}

fn object(fields: &[(&'static str, String)]) -> String {
    let inner: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
    format!("{{{}}}", inner.join(", "))
}

/// `"metadata": {...}` pretty-printed at the top level's indentation.
fn metadata(meta: &serde_json::Value) -> String {
    let pretty = serde_json::to_string_pretty(meta).expect("json values serialize");
    format!("  \"metadata\": {}", pretty.replace('\n', "\n  "))
}

fn document(head: &[(&'static str, String)], list_key: &str, items: &[String], tail: Vec<String>) -> String {
    let mut parts: Vec<String> = head.iter().map(|(k, v)| format!("  \"{k}\": {v}")).collect();
    parts.push(format!("  \"{list_key}\": [\n    {}\n  ]", items.join(",\n    ")));
    parts.extend(tail);
    format!("{{\n{}\n}}\n", parts.join(",\n"))
}

/// The chain as compact JSON (see the module doc).
pub fn chain(chain: &Chain) -> String {
    let stages: Vec<String> = chain
        .stages()
        .iter()
        .map(|s| {
            let mut fields = Vec::new();
            if let Some(name) = &s.name {
                fields.push(("name", value(name)));
            }
            stage_fields(s, &mut fields);
            object(&fields)
        })
        .collect();
    let mut tail = Vec::new();
    let loss = chain.loss();
    if *loss != Stage::zero_loss() {
        let mut fields = Vec::new();
        stage_fields(loss, &mut fields);
        fields.retain(|(_, v)| v != "0" && v != "0.0");
        tail.push(format!("  \"loss\": {}", object(&fields)));
    }
    tail.extend(chain.metadata().map(metadata));
    let head = [("name", value(chain.name())), ("input_size", value(&chain.input_size()))];
    document(&head, "stages", &stages, tail)
}

/// The forward graph as compact JSON in issue 6's format.
pub fn graph(graph: &ForwardGraph) -> String {
    let nodes: Vec<String> = (0..graph.len())
        .map(|v| {
            let inputs: Vec<&str> = graph.inputs(v).iter().map(|&u| graph.node_name(u)).collect();
            let mut fields = vec![("name", value(graph.node_name(v))), ("inputs", value(&inputs))];
            stage_fields(graph.stage(v), &mut fields);
            object(&fields)
        })
        .collect();
    let head = [("name", value(graph.name())), ("input_size", value(&graph.input_size()))];
    document(&head, "nodes", &nodes, graph.metadata().iter().map(|m| metadata(m)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_chain_reads_back_and_omits_defaults() {
        let mut c = Chain::new(
            "t",
            8,
            vec![
                Stage { name: Some("a".into()), backward_overhead: 5, ..Stage::simple(1.5, 3.0, 4, 6) },
                Stage { gradient_size: 2, ..Stage::simple(0.25, 0.5, 4, 4) },
            ],
            Stage::simple(0.0, 0.0, 4, 4),
        )
        .unwrap();
        c.set_metadata(serde_json::json!({"command": "remat zoo x"}));
        let text = chain(&c);
        assert_eq!(Chain::from_json(&text).unwrap(), c);
        assert!(text.contains(
            "{\"name\": \"a\", \"forward_time\": 1.5, \"backward_time\": 3.0, \"output_size\": 4, \"saved_size\": 6, \
             \"backward_overhead\": 5}"
        ));
        assert!(text.contains("\"gradient_size\": 2"));
        assert!(!text.contains("forward_overhead"), "{text}");
        assert!(text.contains("\"loss\": {\"output_size\": 4, \"saved_size\": 4}"), "{text}");
    }
}
