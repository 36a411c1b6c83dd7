//! The two charts remat draws, as SVG: the trade-off of a sweep (makespan
//! against peak memory, one line per algorithm, checkpoint_sequential's K as
//! points, as in the Rotor paper's figures 6-8) and the memory timeline of one
//! schedule (stacked by kind, as in its figure 2).

use super::compare::Verdict;
use super::svg::{Anchor, Scale, Svg, byte_unit, nice_ticks, tick_label};
use super::sweep::Sweep;
use crate::simulate::{Memory, Replay};
use crate::size::format_size;

/// How an algorithm's points are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Marker {
    Triangle,
    Circle,
    Square,
    Diamond,
    HollowDiamond,
    Cross,
    Plus,
}

/// Colour and marker of an algorithm (the Rotor paper's where it has one:
/// optimal blue triangles, revolve green circles, PyTorch a red square,
/// sequential purple crosses). Algorithms added later get the next colour of
/// a spare palette, so every algorithm a sweep reports is drawn.
fn style(algorithm: &str, index: usize) -> (&'static str, Marker) {
    match algorithm {
        "persistent" => ("#1f60c4", Marker::Triangle),
        "exhaustive" => ("#111111", Marker::HollowDiamond),
        "floating" => ("#17becf", Marker::Plus),
        "revolve" => ("#2ca02c", Marker::Circle),
        "store-all" => ("#d62728", Marker::Square),
        "sequential" => ("#9467bd", Marker::Cross),
        "chen-greedy" => ("#ff7f0e", Marker::Square),
        "chen-sqrt" => ("#8c564b", Marker::Diamond),
        _ => (["#e377c2", "#7f7f7f", "#bcbd22", "#17becf"][index % 4], Marker::Plus),
    }
}

fn marker(svg: &mut Svg, kind: Marker, (x, y): (f64, f64), color: &str) {
    let r = 4.5;
    match kind {
        Marker::Triangle => svg.polygon(&[(x, y - r), (x + r, y + 0.8 * r), (x - r, y + 0.8 * r)], color, None),
        Marker::Circle => svg.circle((x, y), r * 0.9, color, color),
        Marker::Square => svg.rect(x - r * 0.85, y - r * 0.85, 1.7 * r, 1.7 * r, color, None),
        Marker::Diamond => svg.polygon(&[(x, y - r), (x + r, y), (x, y + r), (x - r, y)], color, None),
        Marker::HollowDiamond => {
            let r = r * 1.5;
            svg.polygon(&[(x, y - r), (x + r, y), (x, y + r), (x - r, y)], "none", Some(color))
        }
        Marker::Cross => {
            svg.line((x - r, y - r), (x + r, y + r), color, 2.0, None);
            svg.line((x - r, y + r), (x + r, y - r), color, 2.0, None);
        }
        Marker::Plus => {
            svg.line((x - r, y), (x + r, y), color, 2.0, None);
            svg.line((x, y - r), (x, y + r), color, 2.0, None);
        }
    }
}

/// Draws both axes, their ticks, grid lines and labels (x then y) over the
/// pixel ranges of the two scales; x tick labels are the tick values divided
/// by `x_div` (bytes shown in a unit); the x label sits `x_label_gap` pixels
/// below the axis.
fn axes(svg: &mut Svg, x: (&Scale, &[f64]), y: (&Scale, &[f64]), labels: (&str, &str), x_div: f64, x_label_gap: f64) {
    let (xs, xticks) = x;
    let (ys, yticks) = y;
    let (left, right, top, bottom) = (xs.from, xs.to, ys.to, ys.from);
    for &t in xticks {
        let px = xs.at(t);
        svg.line((px, top), (px, bottom), "#e4e4e4", 1.0, None);
        svg.line((px, bottom), (px, bottom + 5.0), "#333", 1.0, None);
        svg.text((px, bottom + 19.0), &tick_label(t / x_div), 12.0, Anchor::Middle, 0.0);
    }
    for &t in yticks {
        let py = ys.at(t);
        svg.line((left, py), (right, py), "#e4e4e4", 1.0, None);
        svg.line((left - 5.0, py), (left, py), "#333", 1.0, None);
        svg.text((left - 8.0, py + 4.0), &tick_label(t), 12.0, Anchor::End, 0.0);
    }
    svg.line((left, bottom), (right, bottom), "#333", 1.2, None);
    svg.line((left, top), (left, bottom), "#333", 1.2, None);
    svg.text(((left + right) / 2.0, bottom + x_label_gap), labels.0, 14.0, Anchor::Middle, 0.0);
    let mid = (top + bottom) / 2.0;
    svg.text((left - 58.0, mid), labels.1, 14.0, Anchor::Middle, -90.0);
}

/// The fastest makespan within each amount of memory, as a step line through
/// `points` (sorted by peak): flat until a point with a smaller makespan,
/// then down to it, and flat again up to `right_end` bytes. Points slower
/// than one with a smaller peak are not on it (they stay as markers).
fn staircase(points: &[(u64, f64)], right_end: u64) -> Vec<(u64, f64)> {
    let mut out: Vec<(u64, f64)> = Vec::new();
    for &(x, y) in points {
        match out.last() {
            None => out.push((x, y)),
            Some(&(_, best)) if y < best => out.extend([(x, best), (x, y)]),
            Some(_) => {}
        }
    }
    if let Some(&(x, y)) = out.last()
        && right_end > x
    {
        out.push((right_end, y));
    }
    out
}

/// The trade-off chart of a sweep: for each algorithm its makespan against
/// the peak memory its schedules actually reach, one marker per budget, and a
/// step line giving the fastest of them within each amount of memory (an
/// algorithm with a single schedule is a lone marker),
/// and checkpoint_sequential's schedule for each K as a cross. The x axis is
/// in the binary unit that suits the chain (KiB, MiB, GiB), the y axis in the
/// chain's time unit.
pub fn tradeoff_svg(sweep: &Sweep) -> String {
    let (width, height) = (1000.0, 600.0);
    let (left, right, top, bottom) = (90.0, 760.0, 70.0, 530.0);
    let mut series: Vec<(String, Vec<(u64, f64)>)> = Vec::new();
    let mut skipped: Vec<&str> = Vec::new();
    for curve in &sweep.curves {
        if curve.algorithm == "sequential" {
            continue; // drawn from its K points below
        }
        let mut pts: Vec<(u64, f64)> = curve
            .points
            .iter()
            .filter_map(|p| match p.verdict {
                Verdict::Solved { makespan, peak_memory, .. } => Some((peak_memory, makespan)),
                _ => None,
            })
            .collect();
        pts.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        pts.dedup();
        if curve.points.iter().any(|p| matches!(p.verdict, Verdict::Skipped { .. })) {
            skipped.push(&curve.algorithm);
        }
        series.push((curve.algorithm.clone(), pts));
    }
    let has_sequential = sweep.curves.iter().any(|c| c.algorithm == "sequential");
    let seq: Vec<(u64, f64)> = if has_sequential {
        sweep.sequential_points.iter().map(|p| (p.peak_memory, p.makespan)).collect()
    } else {
        Vec::new()
    };
    let last_budget = sweep.budgets.last().map(|&b| (b, f64::NAN));
    let all = series.iter().flat_map(|(_, p)| p.iter()).chain(seq.iter()).chain(last_budget.iter());
    let (mut xmin, mut xmax, mut ymin, mut ymax) = (u64::MAX, 0, f64::INFINITY, f64::NEG_INFINITY);
    for &(x, y) in all {
        (xmin, xmax) = (xmin.min(x), xmax.max(x));
        if y.is_finite() {
            (ymin, ymax) = (ymin.min(y), ymax.max(y));
        }
    }
    let mut svg = Svg::new(width, height);
    let title = format!("{}: makespan against peak memory ({} stages + loss)", sweep.chain, sweep.stages);
    svg.text((left, 30.0), &title, 17.0, Anchor::Start, 0.0);
    let subtitle = format!(
        "{} budgets; slot-based solvers with {} slots; store-all: makespan {:.2}, peak {}",
        sweep.budgets.len(),
        sweep.slots,
        sweep.store_all_makespan,
        format_size(sweep.store_all_peak)
    );
    svg.text((left, 52.0), &subtitle, 12.0, Anchor::Start, 0.0);
    if !ymin.is_finite() {
        svg.text(
            ((left + right) / 2.0, (top + bottom) / 2.0),
            "no schedule fits any budget",
            16.0,
            Anchor::Middle,
            0.0,
        );
        return svg.finish();
    }
    let (div, unit) = byte_unit(xmax);
    let (xt, x0, x1) = nice_ticks(xmin as f64 / div, xmax as f64 / div, 8);
    let xticks: Vec<f64> = xt.iter().map(|t| t * div).collect();
    let xs = Scale { lo: x0 * div, hi: x1 * div, from: left, to: right };
    let (yticks, y0, y1) = nice_ticks(ymin, ymax, 7);
    let ys = Scale { lo: y0, hi: y1, from: bottom, to: top };
    let xlabel = format!("peak memory ({unit})");
    axes(&mut svg, (&xs, &xticks), (&ys, &yticks), (&xlabel, "makespan (time unit of the chain)"), div, 42.0);
    let px = |&(x, y): &(u64, f64)| (xs.at(x as f64), ys.at(y));
    let right_end = sweep.budgets.last().copied().unwrap_or(xmax);
    let mut legend: Vec<(String, &str, Marker, bool)> = Vec::new();
    for (i, (name, pts)) in series.iter().enumerate() {
        let (color, m) = style(name, i);
        let line = pts.len() > 1;
        if line {
            // Dashed so that a curve it covers (floating on persistent) shows through.
            let dash = (name == "floating" || name == "exhaustive").then_some("7 5");
            svg.polyline(&staircase(pts, right_end).iter().map(px).collect::<Vec<_>>(), color, 2.0, dash);
        }
        let label = match (skipped.contains(&name.as_str()), pts.is_empty()) {
            (true, _) => format!("{name} (skipped)"),
            (false, true) => format!("{name} (no budget fits)"),
            (false, false) => name.clone(),
        };
        legend.push((label, color, m, line));
    }
    if has_sequential {
        let (color, m) = style("sequential", 0);
        for p in &seq {
            marker(&mut svg, m, px(p), color);
        }
        legend.push(("sequential, K = 1..L".to_string(), color, m, false));
    }
    // Markers over every line; store-all's single point last, on top.
    let mut order: Vec<usize> = (0..series.len()).collect();
    order.sort_by_key(|&i| series[i].0 == "store-all");
    for i in order {
        let (name, pts) = &series[i];
        let (color, m) = style(name, i);
        for p in pts {
            marker(&mut svg, m, px(p), color);
        }
    }
    let lx = right + 25.0;
    svg.text((lx, top + 4.0), "algorithm", 13.0, Anchor::Start, 0.0);
    for (i, (label, color, m, line)) in legend.iter().enumerate() {
        let y = top + 26.0 + 22.0 * i as f64;
        if *line {
            let dash = (label == "floating" || label == "exhaustive").then_some("7 5");
            svg.line((lx, y), (lx + 28.0, y), color, 2.0, dash);
        }
        marker(&mut svg, *m, (lx + 14.0, y), color);
        svg.text((lx + 36.0, y + 4.0), label, 12.0, Anchor::Start, 0.0);
    }
    let notes = [
        "markers: the schedule found at each",
        "budget, at the peak it reaches;",
        "lines: the fastest one within",
        "that much memory (lower is faster)",
    ];
    for (i, note) in notes.iter().enumerate() {
        let y = top + 30.0 + 22.0 * legend.len() as f64 + 14.0 * i as f64;
        svg.text((lx, y), note, 10.5, Anchor::Start, 0.0);
    }
    svg.finish()
}

/// The memory timeline of a replayed schedule: for each operation (x, in
/// order) the memory in use while it runs, stacked by kind (activations
/// a^l, recorded activations abar^l, gradients delta^l, transient workspace),
/// with the memory left once it ends as a black step line, the budget as a
/// dashed line when given, and the peak marked. The operations are named
/// along the x axis when there are at most 48 of them.
pub fn timeline_svg(replay: &Replay, budget: Option<u64>, title: &str) -> String {
    let (width, height) = (1060.0, 560.0);
    let (left, right, top, bottom) = (90.0, 820.0, 70.0, 450.0);
    let named = replay.steps.len() <= 48;
    let n = replay.steps.len();
    let mut svg = Svg::new(width, height);
    svg.text((left, 30.0), title, 17.0, Anchor::Start, 0.0);
    let subtitle = format!(
        "{n} operations; makespan {:.2}; peak {} during operation {} ({})",
        replay.makespan,
        format_size(replay.peak_memory),
        replay.peak_index + 1,
        replay.steps.get(replay.peak_index).map(|s| s.op.to_string()).unwrap_or_default()
    );
    svg.text((left, 52.0), &subtitle, 12.0, Anchor::Start, 0.0);
    let ymax = replay.peak_memory.max(budget.unwrap_or(0)).max(1);
    let (div, unit) = byte_unit(ymax);
    let (yt, _, y1) = nice_ticks(0.0, ymax as f64 / div, 7);
    let yticks: Vec<f64> = yt.iter().map(|t| t * div).collect();
    let ys = Scale { lo: 0.0, hi: y1 * div, from: bottom, to: top };
    let xs = Scale { lo: 0.0, hi: n.max(1) as f64, from: left, to: right };
    // Named operations label the x axis themselves; otherwise number them.
    let (xt, _, _) = nice_ticks(0.0, n.max(1) as f64, 10);
    let xticks: Vec<f64> =
        if named { Vec::new() } else { xt.into_iter().filter(|&t| t <= n as f64 && t.fract() == 0.0).collect() };
    let ylabel = format!("memory ({unit})");
    // The y ticks are in bytes: label them in the unit.
    let ylabels: Vec<f64> = yticks.iter().map(|t| t / div).collect();
    let ys_unit = Scale { lo: ys.lo / div, hi: ys.hi / div, ..ys };
    let gap = if named { 84.0 } else { 42.0 };
    axes(&mut svg, (&xs, &xticks), (&ys_unit, &ylabels), ("operation (in schedule order)", &ylabel), 1.0, gap);
    type Kind = (&'static str, &'static str, fn(&Memory) -> u64);
    let kinds: [Kind; 4] = [
        ("activations a", "#4e79a7", |m| m.activations),
        ("recorded activations abar", "#f28e2b", |m| m.saved),
        ("gradients delta", "#59a14f", |m| m.gradients),
        ("transient workspace", "#e15759", |m| m.transient),
    ];
    let mut below = vec![0u64; n];
    for &(_, color, get) in &kinds {
        let above: Vec<u64> = replay.steps.iter().zip(&below).map(|(s, b)| b + get(&s.during)).collect();
        let mut poly = Vec::with_capacity(4 * n);
        for (i, &v) in above.iter().enumerate() {
            poly.push((xs.at(i as f64), ys.at(v as f64)));
            poly.push((xs.at(i as f64 + 1.0), ys.at(v as f64)));
        }
        for (i, &v) in below.iter().enumerate().rev() {
            poly.push((xs.at(i as f64 + 1.0), ys.at(v as f64)));
            poly.push((xs.at(i as f64), ys.at(v as f64)));
        }
        if !poly.is_empty() {
            svg.polygon(&poly, color, None);
        }
        below = above;
    }
    let mut after = Vec::with_capacity(2 * n);
    for (i, s) in replay.steps.iter().enumerate() {
        let y = ys.at(s.after.total() as f64);
        after.push((xs.at(i as f64), y));
        after.push((xs.at(i as f64 + 1.0), y));
    }
    svg.polyline(&after, "#111", 1.5, None);
    if let Some(b) = budget {
        let y = ys.at(b as f64);
        svg.line((left, y), (right, y), "#b00020", 2.0, Some("8 5"));
        svg.text_halo((right - 4.0, y - 6.0), &format!("budget {}", format_size(b)), 12.0, Anchor::End);
    }
    if n > 0 {
        let (px, py) = (xs.at(replay.peak_index as f64 + 0.5), ys.at(replay.peak_memory as f64));
        svg.circle((px, py), 4.0, "#111", "white");
        svg.text_halo((px + 8.0, py + 14.0), "peak", 12.0, Anchor::Start);
    }
    if named {
        for (i, s) in replay.steps.iter().enumerate() {
            let x = xs.at(i as f64 + 0.5);
            svg.text((x + 3.0, bottom + 12.0), &s.op.to_string(), 11.0, Anchor::End, -60.0);
        }
    }
    let lx = right + 25.0;
    svg.text((lx, top - 10.0), "memory while each", 12.0, Anchor::Start, 0.0);
    svg.text((lx, top + 4.0), "operation runs:", 12.0, Anchor::Start, 0.0);
    for (i, (label, color, _)) in kinds.iter().enumerate() {
        let y = top + 24.0 + 22.0 * i as f64;
        svg.rect(lx, y - 7.0, 14.0, 14.0, color, None);
        svg.text((lx + 22.0, y + 4.0), label, 12.0, Anchor::Start, 0.0);
    }
    let y = top + 24.0 + 22.0 * kinds.len() as f64;
    svg.line((lx, y), (lx + 14.0, y), "#111", 1.5, None);
    svg.text((lx + 22.0, y + 4.0), "in use after the operation", 12.0, Anchor::Start, 0.0);
    if budget.is_some() {
        let y = y + 22.0;
        svg.line((lx, y), (lx + 14.0, y), "#b00020", 2.0, Some("4 3"));
        svg.text((lx + 22.0, y + 4.0), "budget", 12.0, Anchor::Start, 0.0);
    }
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::compare::reported;
    use crate::report::sweep::{budgets, sweep};
    use crate::simulate::simulate;
    use crate::solve::SolveOptions;

    #[test]
    fn tradeoff_has_every_algorithm_in_its_legend() {
        let c = crate::synthetic::network_like(2, 8);
        let opts = SolveOptions::default();
        let b = budgets(&c, &reported(), &opts, None, None, 5).unwrap();
        let s = sweep(&c, &b, &reported(), &opts, None).unwrap();
        let doc = tradeoff_svg(&s);
        for a in reported() {
            assert!(doc.contains(&format!(">{}", a.name())), "legend lacks {a}");
        }
        assert!(doc.contains("peak memory (MiB)") && doc.contains("makespan (time unit of the chain)"));
        // One cross (two lines) per sequential K.
        assert!(doc.matches(r##"stroke="#9467bd" stroke-width="2""##).count() >= 2 * 8);
    }

    #[test]
    fn staircase_keeps_the_front() {
        let pts = [(1, 9.0), (2, 7.0), (3, 8.0), (4, 5.0)];
        assert_eq!(staircase(&pts, 6), vec![(1, 9.0), (2, 9.0), (2, 7.0), (4, 7.0), (4, 5.0), (6, 5.0)]);
        assert_eq!(staircase(&[(3, 1.0)], 3), vec![(3, 1.0)]);
    }

    #[test]
    fn timeline_stacks_four_kinds_and_the_budget() {
        let c = crate::synthetic::network_like(2, 5);
        let ops = crate::solve::baselines::segmented(&c, &[2]);
        let replay = simulate(&c, &ops).unwrap();
        let doc = timeline_svg(&replay, Some(replay.peak_memory + 1), "t");
        assert_eq!(doc.matches("<polygon").count(), 4);
        assert!(doc.contains("budget ") && doc.contains(">F_ck^1<") && doc.contains("memory (MiB)"));
    }
}
