//! The model, its data and its math, shared by the 3D-parallel run and the single-process
//! reference: a stack of residual MLP blocks `y = x + W₂·tanh(W₁·x + b₁) + b₂` (`W₁`: ffn × hidden,
//! `W₂`: hidden × ffn), trained by plain SGD on a mean squared error against a fixed synthetic
//! target. All in f64, so the parallel run's sums in another order stay within ~1e-15.
//!
//! A tensor-parallel shard of a block holds rows `[t·f, (t+1)·f)` of `W₁` and `b₁` (column
//! parallel: no communication forward) and the same columns of `W₂` (row parallel: its partial
//! products are summed across the shards, `tp_sum`), and all of `b₂` (added after the sum).
//! Backward mirrors it: the input gradient's contribution through `W₁` is the sum over the
//! shards.

/// Sizes and training settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub hidden: usize,
    pub ffn: usize,
    pub layers: usize,
    /// Global batch (all data-parallel replicas together).
    pub batch: usize,
    /// Micro-batches per replica and step.
    pub micro: usize,
    pub steps: usize,
    pub lr: f64,
    /// A data-parallel gradient bucket is all-reduced once it holds this many elements.
    pub bucket: usize,
}

/// splitmix64: small, seeded, the same numbers everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }
}

/// One block's parameters (or gradients), whole or a tensor-parallel shard with `f` rows of
/// `W₁`.
#[derive(Debug, Clone)]
pub struct Block {
    pub h: usize,
    pub f: usize,
    /// f × h, row-major.
    pub w1: Vec<f64>,
    pub b1: Vec<f64>,
    /// h × f, row-major.
    pub w2: Vec<f64>,
    pub b2: Vec<f64>,
}

impl Block {
    /// Block `layer` of the whole model, drawn from its own seed.
    pub fn init(layer: usize, h: usize, f: usize) -> Self {
        let mut r = Rng::new(1000 + layer as u64);
        Self {
            h,
            f,
            w1: r.vec(f * h, 1.0 / (h as f64).sqrt()),
            b1: r.vec(f, 0.1),
            w2: r.vec(h * f, 0.5 / (f as f64).sqrt()),
            b2: r.vec(h, 0.1),
        }
    }

    /// Shard `t` of `tp` (columns of the first linear map, rows of the second).
    pub fn shard(&self, t: usize, tp: usize) -> Self {
        let (h, f) = (self.h, self.f / tp);
        let rows = t * f..(t + 1) * f;
        Self {
            h,
            f,
            w1: self.w1[rows.start * h..rows.end * h].to_vec(),
            b1: self.b1[rows.clone()].to_vec(),
            w2: (0..h)
                .flat_map(|o| self.w2[o * self.f + rows.start..o * self.f + rows.end].to_vec())
                .collect(),
            b2: self.b2.clone(),
        }
    }

    pub fn zeros_like(&self) -> Self {
        let z = |v: &Vec<f64>| vec![0.0; v.len()];
        Self {
            h: self.h,
            f: self.f,
            w1: z(&self.w1),
            b1: z(&self.b1),
            w2: z(&self.w2),
            b2: z(&self.b2),
        }
    }

    fn parts_mut(&mut self) -> [&mut Vec<f64>; 4] {
        [&mut self.w1, &mut self.b1, &mut self.w2, &mut self.b2]
    }

    pub fn len(&self) -> usize {
        self.w1.len() + self.b1.len() + self.w2.len() + self.b2.len()
    }

    /// Appends every parameter to `out`.
    pub fn flatten_into(&self, out: &mut Vec<f64>) {
        for p in [&self.w1, &self.b1, &self.w2, &self.b2] {
            out.extend_from_slice(p);
        }
    }

    /// Reads every parameter back from the front of `v`; returns the rest.
    pub fn unflatten<'a>(&mut self, mut v: &'a [f64]) -> &'a [f64] {
        for p in self.parts_mut() {
            let (a, b) = v.split_at(p.len());
            p.copy_from_slice(a);
            v = b;
        }
        v
    }

    /// `self -= lr · g`.
    pub fn sgd(&mut self, g: &Block, lr: f64) {
        let gs = [&g.w1, &g.b1, &g.w2, &g.b2];
        for (p, g) in self.parts_mut().into_iter().zip(gs) {
            for (p, g) in p.iter_mut().zip(g) {
                *p -= lr * g;
            }
        }
    }
}

/// What the backward pass of a block needs from its forward pass.
pub struct Cache {
    x: Vec<f64>,
    a: Vec<f64>,
}

/// `y = x + tp_sum(tanh(x·W₁ᵀ + b₁)·W₂ᵀ) + b₂` for `n` rows of `x`.
pub fn forward(
    b: &Block,
    x: Vec<f64>,
    n: usize,
    mut tp_sum: impl FnMut(&mut [f64]) -> rcomm::Result<()>,
) -> rcomm::Result<(Vec<f64>, Cache)> {
    let (h, f) = (b.h, b.f);
    let mut a = vec![0.0; n * f];
    for r in 0..n {
        let xr = &x[r * h..(r + 1) * h];
        for k in 0..f {
            let w = &b.w1[k * h..(k + 1) * h];
            let z = b.b1[k] + xr.iter().zip(w).map(|(x, w)| x * w).sum::<f64>();
            a[r * f + k] = z.tanh();
        }
    }
    let mut p = vec![0.0; n * h];
    for r in 0..n {
        let ar = &a[r * f..(r + 1) * f];
        for o in 0..h {
            let w = &b.w2[o * f..(o + 1) * f];
            p[r * h + o] = ar.iter().zip(w).map(|(a, w)| a * w).sum();
        }
    }
    tp_sum(&mut p)?;
    let y = (0..n * h).map(|i| x[i] + p[i] + b.b2[i % h]).collect();
    Ok((y, Cache { x, a }))
}

/// Backward through a block: adds its parameter gradients to `g` and returns the gradient of
/// its input.
pub fn backward(
    b: &Block,
    c: &Cache,
    dy: Vec<f64>,
    n: usize,
    g: &mut Block,
    mut tp_sum: impl FnMut(&mut [f64]) -> rcomm::Result<()>,
) -> rcomm::Result<Vec<f64>> {
    let (h, f) = (b.h, b.f);
    let mut dz = vec![0.0; n * f];
    for r in 0..n {
        let (dyr, ar) = (&dy[r * h..(r + 1) * h], &c.a[r * f..(r + 1) * f]);
        for (o, &d) in dyr.iter().enumerate() {
            g.b2[o] += d;
            for (w, a) in g.w2[o * f..(o + 1) * f].iter_mut().zip(ar) {
                *w += d * a;
            }
        }
        for k in 0..f {
            let da: f64 = (0..h).map(|o| dyr[o] * b.w2[o * f + k]).sum();
            dz[r * f + k] = da * (1.0 - ar[k] * ar[k]);
        }
    }
    let mut dx = vec![0.0; n * h];
    for r in 0..n {
        let (dzr, xr) = (&dz[r * f..(r + 1) * f], &c.x[r * h..(r + 1) * h]);
        let dxr = &mut dx[r * h..(r + 1) * h];
        for (k, &d) in dzr.iter().enumerate() {
            g.b1[k] += d;
            let (gw, w) = (&mut g.w1[k * h..(k + 1) * h], &b.w1[k * h..(k + 1) * h]);
            for (((gw, dx), x), w) in gw.iter_mut().zip(dxr.iter_mut()).zip(xr).zip(w) {
                *gw += d * x;
                *dx += d * w;
            }
        }
    }
    tp_sum(&mut dx)?;
    Ok(dx.iter().zip(&dy).map(|(a, b)| a + b).collect())
}

/// The training set: `batch` rows of inputs and targets (`y = tanh(T·x)`, `T` fixed), the same
/// every step.
pub struct Data {
    pub x: Vec<f64>,
    pub y: Vec<f64>,
}

pub fn data(batch: usize, h: usize) -> Data {
    let mut r = Rng::new(7);
    let t = r.vec(h * h, 1.5 / (h as f64).sqrt());
    let x = r.vec(batch * h, 1.0);
    let y = (0..batch * h)
        .map(|i| {
            let (row, o) = (i / h, i % h);
            let s: f64 = (0..h).map(|j| t[o * h + j] * x[row * h + j]).sum();
            s.tanh()
        })
        .collect();
    Data { x, y }
}

/// The loss `Σ (out − y)² / (batch · hidden)` of these rows (part of the global batch of
/// `batch` rows) and its gradient.
pub fn loss(out: &[f64], y: &[f64], batch: usize, h: usize) -> (f64, Vec<f64>) {
    let scale = 1.0 / (batch * h) as f64;
    let loss = out
        .iter()
        .zip(y)
        .map(|(o, y)| (o - y) * (o - y))
        .sum::<f64>()
        * scale;
    let grad = out
        .iter()
        .zip(y)
        .map(|(o, y)| 2.0 * (o - y) * scale)
        .collect();
    (loss, grad)
}

/// The single-process run: the whole model on the whole batch, one step at a time. Returns the
/// loss of every step (before its update).
pub fn reference(cfg: &Config) -> Vec<f64> {
    let (h, n) = (cfg.hidden, cfg.batch);
    let mut blocks: Vec<Block> = (0..cfg.layers)
        .map(|l| Block::init(l, h, cfg.ffn))
        .collect();
    let d = data(n, h);
    let none = |_: &mut [f64]| Ok(());
    let mut losses = Vec::new();
    for _ in 0..cfg.steps {
        let mut x = d.x.clone();
        let mut caches = Vec::new();
        for b in &blocks {
            let (y, c) = forward(b, x, n, none).expect("no communication");
            caches.push(c);
            x = y;
        }
        let (l, mut dy) = loss(&x, &d.y, n, h);
        losses.push(l);
        for (b, c) in blocks.iter_mut().zip(&caches).rev() {
            let mut g = b.zeros_like();
            dy = backward(b, c, dy, n, &mut g, none).expect("no communication");
            b.sgd(&g, cfg.lr);
        }
    }
    losses
}
