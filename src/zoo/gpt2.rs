//! GPT-2 (Radford et al. 2019) as Hugging Face's `GPT2LMHeadModel` computes it
//! in training mode: eager attention (scores and probabilities materialized),
//! dropout 0.1 on embeddings, attention probabilities and residual branches,
//! and the causal language-modelling loss.
//!
//! Stages: `embed` (token + position embeddings, dropout), one per transformer
//! block `h.i`, `ln_f`, `lm_head` (tied to the token embedding). What a block
//! keeps is, per token, 34 x hidden bytes in 16-bit plus 5 x heads x seq bytes
//! of attention (Korthikanti et al. 2022, "Reducing Activation Recomputation in
//! Large Transformer Models", eq. 1), plus the LayerNorm statistics. The GELU is
//! taken as one fused kernel keeping its input (`nn.GELU(approximate="tanh")`);
//! Hugging Face's Python `NewGELUActivation` keeps a few more tensors.

use super::net::{Builder, Src};

/// One GPT-2 size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Transformer blocks.
    pub layers: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Attention heads.
    pub heads: usize,
}

/// GPT-2's vocabulary.
pub const VOCAB: usize = 50257;
/// Positions GPT-2 was trained with: the longest sequence.
pub const POSITIONS: usize = 1024;

/// Builds the network into `b` (input: batch x seq token ids, int64) and its loss.
pub fn build(b: &mut Builder, cfg: &Config) {
    let d = cfg.hidden;
    b.block("embed");
    let e = b.embedding("wte+wpe", Src::Input, VOCAB, POSITIONS, d);
    let mut x = b.dropout("drop", e);
    for i in 0..cfg.layers {
        b.block(format!("h.{i}"));
        let ln1 = b.layer_norm("ln_1", x);
        let qkv = b.linear("attn.c_attn", ln1, 3 * d, true);
        let scores = b.attention_scores("attn.scores", qkv, cfg.heads);
        let probs = b.softmax("attn.softmax", scores);
        let probs = b.dropout("attn.attn_dropout", probs);
        let ctx = b.attention_context("attn.context", probs, qkv);
        let proj = b.merge_heads_linear("attn.c_proj", ctx, d);
        let proj = b.dropout("attn.resid_dropout", proj);
        let h = b.add("add_1", proj, x);
        let ln2 = b.layer_norm("ln_2", h);
        let fc = b.linear("mlp.c_fc", ln2, 4 * d, true);
        let act = b.gelu("mlp.act", fc);
        let out = b.linear("mlp.c_proj", act, d, true);
        let out = b.dropout("mlp.dropout", out);
        x = b.add("add_2", h, out);
    }
    b.block("ln_f");
    x = b.layer_norm("", x);
    b.block("lm_head");
    x = b.linear_tied("", x, VOCAB);
    b.loss();
    b.cross_entropy("loss", x, 2, true);
}
