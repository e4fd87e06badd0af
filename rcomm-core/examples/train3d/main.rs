//! A toy 3D-parallel training step: data parallel × pipeline parallel × tensor parallel.
//!
//! The model (`model.rs`) is a stack of residual MLP blocks. On `dp × pp × tp` ranks laid out
//! by an [`rcomm::Mesh`] (mesh rank `= (d·pp + p)·tp + t`: tensor-parallel rank fastest, kept
//! inside a node):
//!
//! * **tensor parallel**: every block is split Megatron-style over the `tp` ranks of its stage
//!   (first linear map by output columns, second by input rows); one `allreduce` on the tp
//!   communicator per block forward, one per block backward;
//! * **pipeline parallel**: the blocks are split into `pp` stages; each replica's batch is cut
//!   into micro-batches that run a GPipe schedule (all forwards, then all backwards in reverse
//!   order), activations sent forward and their gradients back with `isend`/`recv` on the pp
//!   communicator;
//! * **data parallel**: each replica trains on its own slice of the batch; during the backward
//!   of the last micro-batch, as soon as a bucket of blocks has its final gradients, an
//!   `iallreduce` on the dp communicator starts summing it while the backward goes on; all are
//!   waited for before the SGD step.
//!
//! The loss of each step is summed over the ranks that compute it (the last stage) and printed
//! by rank 0, then rank 0 runs the single-process reference (`model::reference`: whole model,
//! whole batch) and checks that every step's loss agrees within 1e-9 (relative). On one rank
//! without `--dp/--pp/--tp` (or with `--reference`) the example runs only the reference.
//!
//! With `--device` the communicated tensors go through device memory (`device.rs`): the tp
//! sums and the dp gradient buckets are `allreduce_device` calls on `DeviceBuffer`s, the
//! pipeline's activations and gradients `send_device` / `recv_device`. The model's math stays
//! on the host — this is a communication example — so each tensor is copied to the device
//! before its communication and back after it. There is no non-blocking device collective
//! yet, so in this mode a gradient bucket's all-reduce blocks where it would start (no overlap
//! with the backward), and pipeline sends are blocking. The losses must agree with the
//! reference as in host mode. Without a GPU, `RCOMM_GPU_STANDIN=1` runs it on the host-memory
//! stand-in of a device.
//!
//! Run: `rcomm-run -n 8 target/release/examples/train3d` (2 × 2 × 2; options `--dp --pp --tp
//! --steps --hidden --ffn --layers --batch --micro --lr --bucket --reference --device`).

mod device;
mod model;

use device::Device;
use model::{Block, Cache, Config};
use rcomm::{CollRequest, Communicator, Mesh, Op, Request, Tag};

/// Sizes of the three parallel dimensions.
#[derive(Debug, Clone, Copy)]
struct Dims {
    dp: u32,
    pp: u32,
    tp: u32,
}

/// This rank's place in the mesh and the communicators of its three dimensions.
struct Groups {
    tp: Communicator,
    pp: Communicator,
    dp: Communicator,
    /// (d, p, t): this rank's index in each dimension.
    coords: (u32, u32, u32),
}

/// The tp, pp and dp communicators of a `dp × pp × tp` [`Mesh`]: tp varies fastest and is
/// placed inside a node (rcomm warns if it cannot be). Each communicator is ordered by its own
/// coordinate, so its rank is this rank's index in that dimension.
fn groups(world: &Communicator, n: Dims) -> rcomm::Result<Groups> {
    let mesh = Mesh::new(world, &[("dp", n.dp), ("pp", n.pp), ("tp", n.tp)])?;
    let c = mesh.coords();
    Ok(Groups {
        tp: mesh.comm("tp")?.clone(),
        pp: mesh.comm("pp")?.clone(),
        dp: mesh.comm("dp")?.clone(),
        coords: (c[0], c[1], c[2]),
    })
}

struct Args {
    cfg: Config,
    dims: Option<Dims>,
    reference: bool,
    /// `--device`: communicate through device memory.
    device: bool,
}

fn parse_args(size: u32) -> Result<Args, String> {
    let mut cfg = Config {
        hidden: 32,
        ffn: 64,
        layers: 4,
        batch: 32,
        micro: 4,
        steps: 6,
        lr: 0.2,
        bucket: 2048,
    };
    let (mut dims, mut given, mut reference) = (default_dims(size), false, false);
    let mut device = false;
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--reference" {
            reference = true;
            continue;
        }
        if k == "--device" {
            device = true;
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        let num = || v.parse::<usize>().map_err(|e| format!("{k} {v}: {e}"));
        match k.as_str() {
            "--dp" => (dims.dp, given) = (num()? as u32, true),
            "--pp" => (dims.pp, given) = (num()? as u32, true),
            "--tp" => (dims.tp, given) = (num()? as u32, true),
            "--hidden" => cfg.hidden = num()?,
            "--ffn" => cfg.ffn = num()?,
            "--layers" => cfg.layers = num()?,
            "--batch" => cfg.batch = num()?,
            "--micro" => cfg.micro = num()?,
            "--steps" => cfg.steps = num()?,
            "--bucket" => cfg.bucket = num()?,
            "--lr" => cfg.lr = v.parse().map_err(|e| format!("{k} {v}: {e}"))?,
            _ => return Err(format!("unknown option {k}")),
        }
    }
    if reference || (size == 1 && !given) {
        if size != 1 {
            return Err("--reference runs on one rank".into());
        }
        return Ok(Args {
            cfg,
            dims: None,
            reference: true,
            device,
        });
    }
    let (dp, pp, tp) = (dims.dp as usize, dims.pp as usize, dims.tp as usize);
    if dp * pp * tp != size as usize {
        return Err(format!(
            "dp {dp} × pp {pp} × tp {tp} is not the {size} ranks"
        ));
    }
    if !cfg.layers.is_multiple_of(pp)
        || !cfg.ffn.is_multiple_of(tp)
        || !cfg.batch.is_multiple_of(dp * cfg.micro)
    {
        return Err(format!(
            "need pp | layers ({pp}, {}), tp | ffn ({tp}, {}), dp·micro | batch ({}, {})",
            cfg.layers,
            cfg.ffn,
            dp * cfg.micro,
            cfg.batch
        ));
    }
    Ok(Args {
        cfg,
        dims: Some(dims),
        reference: false,
        device,
    })
}

/// tp 2 and pp 2 where the size allows, the rest data parallel (8 ranks: 2 × 2 × 2).
fn default_dims(size: u32) -> Dims {
    let tp = if size.is_multiple_of(2) { 2 } else { 1 };
    let pp = if (size / tp).is_multiple_of(2) { 2 } else { 1 };
    Dims {
        dp: size / tp / pp,
        pp,
        tp,
    }
}

/// One rank's part of the model and of the data.
struct Stage<'a> {
    g: &'a Groups,
    n: Dims,
    cfg: &'a Config,
    /// This stage's blocks, this rank's tensor-parallel shard of each.
    blocks: Vec<Block>,
    data: model::Data,
    /// `--device`: this rank's device, through which every communicated tensor goes.
    dev: Option<Device>,
}

/// A data-parallel gradient bucket's sum: in flight (host) or done (device: blocking).
enum Bucket {
    Host(CollRequest<f64>),
    Done(Vec<f64>),
}

impl Stage<'_> {
    fn first(&self) -> bool {
        self.g.coords.1 == 0
    }
    fn last(&self) -> bool {
        self.g.coords.1 == self.n.pp - 1
    }

    /// Receives a pipeline message (activations or their gradients) into `v`.
    fn pp_recv(&self, v: &mut [f64], src: u32, tag: Tag) -> rcomm::Result<()> {
        match self.dev {
            Some(d) => d.recv(&self.g.pp, v, src, tag),
            None => self.g.pp.recv(v, src, tag).map(drop),
        }
    }

    /// Sends a pipeline message: started (host, its request pushed on `sends`) or done
    /// (device).
    fn pp_send(
        &self,
        v: Vec<f64>,
        dest: u32,
        tag: Tag,
        sends: &mut Vec<Request<f64>>,
    ) -> rcomm::Result<()> {
        match self.dev {
            Some(d) => d.send(&self.g.pp, &v, dest, tag),
            None => {
                sends.push(self.g.pp.isend(v, dest, tag)?);
                Ok(())
            }
        }
    }

    /// One training step; returns this rank's part of the loss (non-zero on the last stage's
    /// tp rank 0 only, so that a world sum counts every sample once) and the bucket count.
    fn step(&mut self) -> rcomm::Result<(f64, usize)> {
        let (cfg, g) = (self.cfg, self.g);
        let (d, p, t) = g.coords;
        let h = cfg.hidden;
        let rows = cfg.batch / self.n.dp as usize; // this replica's samples
        let mb = rows / cfg.micro; // rows per micro-batch
        let row0 = d as usize * rows;
        let dev = self.dev;
        let tp_sum = |v: &mut [f64]| match dev {
            Some(d) => d.allreduce(&g.tp, v),
            None => g.tp.allreduce_in_place(v, Op::Sum),
        };

        // Forward, every micro-batch (GPipe): receive from the previous stage, send on.
        let mut caches: Vec<Vec<Cache>> = Vec::new();
        let mut outs = Vec::new();
        let mut sends: Vec<Request<f64>> = Vec::new();
        for m in 0..cfg.micro {
            let r0 = (row0 + m * mb) * h;
            let mut x = if self.first() {
                self.data.x[r0..r0 + mb * h].to_vec()
            } else {
                let mut x = vec![0.0; mb * h];
                self.pp_recv(&mut x, p - 1, Tag(m as i32))?;
                x
            };
            let mut cache = Vec::new();
            for b in &self.blocks {
                let (y, c) = model::forward(b, x, mb, tp_sum)?;
                cache.push(c);
                x = y;
            }
            caches.push(cache);
            if self.last() {
                outs.push(x);
            } else {
                self.pp_send(x, p + 1, Tag(m as i32), &mut sends)?;
            }
        }

        // Backward in reverse micro-batch order. During the last one (m = 0) each block's
        // gradients are final as soon as its backward is done: buckets of them start their
        // data-parallel allreduce at once and overlap with the remaining backward.
        let mut grads: Vec<Block> = self.blocks.iter().map(Block::zeros_like).collect();
        let mut loss = 0.0;
        let mut pending: Vec<usize> = Vec::new();
        let mut buckets: Vec<(Vec<usize>, Bucket)> = Vec::new();
        for m in (0..cfg.micro).rev() {
            let mut dy = if self.last() {
                let r0 = (row0 + m * mb) * h;
                let (l, dy) = model::loss(&outs[m], &self.data.y[r0..r0 + mb * h], cfg.batch, h);
                loss += l;
                dy
            } else {
                let mut dy = vec![0.0; mb * h];
                self.pp_recv(&mut dy, p + 1, Tag((cfg.micro + m) as i32))?;
                dy
            };
            for l in (0..self.blocks.len()).rev() {
                dy = model::backward(
                    &self.blocks[l],
                    &caches[m][l],
                    dy,
                    mb,
                    &mut grads[l],
                    tp_sum,
                )?;
                if m == 0 {
                    pending.push(l);
                    let len: usize = pending.iter().map(|&l| grads[l].len()).sum();
                    if len >= cfg.bucket || l == 0 {
                        let mut buf = Vec::with_capacity(len);
                        for &l in &pending {
                            grads[l].flatten_into(&mut buf);
                        }
                        let sum = match dev {
                            Some(d) => {
                                d.allreduce(&g.dp, &mut buf)?;
                                Bucket::Done(buf)
                            }
                            None => Bucket::Host(g.dp.iallreduce(buf, Op::Sum)?),
                        };
                        buckets.push((std::mem::take(&mut pending), sum));
                    }
                }
            }
            if !self.first() {
                self.pp_send(dy, p - 1, Tag((cfg.micro + m) as i32), &mut sends)?;
            }
        }
        rcomm::wait_all(sends)?;
        let nbuckets = buckets.len();
        for (ls, bucket) in buckets {
            let sum = match bucket {
                Bucket::Host(req) => req.wait()?,
                Bucket::Done(v) => v,
            };
            let mut rest = &sum[..];
            for l in ls {
                rest = grads[l].unflatten(rest);
            }
        }
        for (b, gr) in self.blocks.iter_mut().zip(&grads) {
            b.sgd(gr, cfg.lr);
        }
        let mine = if self.last() && t == 0 { loss } else { 0.0 };
        Ok((mine, nbuckets))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let world = rcomm::init()?;
    let (rank, size) = (world.rank(), world.size());
    let Args {
        cfg,
        dims,
        reference,
        device,
    } = parse_args(size)?;
    if reference {
        println!(
            "train3d: single-process reference, {} blocks, hidden {}, ffn {}, batch {}",
            cfg.layers, cfg.hidden, cfg.ffn, cfg.batch
        );
        for (s, l) in model::reference(&cfg).iter().enumerate() {
            println!("step {s} loss {l:.17e}");
        }
        return Ok(());
    }
    let n = dims.expect("parallel run");
    let g = groups(&world, n)?;
    let (_, p, t) = g.coords;
    let per_stage = cfg.layers / n.pp as usize;
    let first = p as usize * per_stage;
    let mut stage = Stage {
        g: &g,
        n,
        cfg: &cfg,
        blocks: (first..first + per_stage)
            .map(|l| Block::init(l, cfg.hidden, cfg.ffn).shard(t as usize, n.tp as usize))
            .collect(),
        data: model::data(cfg.batch, cfg.hidden),
        dev: if device { Some(Device::pick()?) } else { None },
    };
    let mut losses = Vec::new();
    for s in 0..cfg.steps {
        let (mine, nbuckets) = stage.step()?;
        let mut l = [mine];
        world.allreduce_in_place(&mut l, Op::Sum)?;
        losses.push(l[0]);
        if rank == 0 {
            if s == 0 {
                println!(
                    "train3d: dp {} x pp {} x tp {} on {size} ranks; {} blocks ({per_stage} per \
                     stage), hidden {}, ffn {} ({} per tp rank), batch {} ({} micro-batches of {} \
                     per replica), {nbuckets} gradient bucket(s) per stage; communication \
                     through {} memory",
                    n.dp,
                    n.pp,
                    n.tp,
                    cfg.layers,
                    cfg.hidden,
                    cfg.ffn,
                    cfg.ffn / n.tp as usize,
                    cfg.batch,
                    cfg.micro,
                    cfg.batch / n.dp as usize / cfg.micro,
                    if device { "device" } else { "host" }
                );
            }
            println!("step {s} loss {:.17e}", l[0]);
        }
    }
    if rank == 0 {
        let want = model::reference(&cfg);
        let diff = losses
            .iter()
            .zip(&want)
            .map(|(a, b)| ((a - b) / b).abs())
            .fold(0.0, f64::max);
        println!("max relative difference from the single-process reference: {diff:e}");
        if diff > 1e-9 {
            return Err(format!("losses {losses:?} differ from the reference {want:?}").into());
        }
    }
    Ok(())
}
