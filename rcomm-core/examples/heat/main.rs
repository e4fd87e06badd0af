//! 2D heat diffusion (Jacobi iteration of the 5-point Laplace stencil) on an `NX × NY` grid,
//! block-decomposed over a `PX × PY` process grid: each step every rank exchanges one-cell halos
//! with its four neighbours (non-blocking sends and receives in a request scope), then updates
//! its block; every `--every` steps the largest change of any cell is combined by a `Max`
//! allreduce, and the run stops when it falls below `--tol`.
//!
//! The boundary (the cells around the grid) is fixed: 1 along the top, a ramp from 1 to 0 down
//! the left side, 0 elsewhere; the interior starts at 0.
//!
//! Every cell is updated with the same arithmetic whatever the decomposition, and `Max` is
//! exact, so the steps, the residual and the fixed-point checksum (the cells as integers in
//! units of 2⁻⁴⁰, summed by an integer allreduce) are bitwise the same on any number of ranks;
//! only the floating-point `sum` may differ in its last bits (its terms are added in another
//! order).
//!
//! Run: `rcomm-run -n 4 target/release/examples/heat --nx 256 --ny 192 --steps 50000 --tol
//! 1e-5` (options: `--nx`, `--ny`, `--steps`, `--tol`, `--every`; a world of one runs it
//! serially).

use rcomm::{Communicator, Op, Tag};

/// Command line, `--name value` pairs.
#[derive(Debug, Clone)]
struct Args {
    nx: usize,
    ny: usize,
    steps: usize,
    tol: f64,
    every: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        nx: 128,
        ny: 96,
        steps: 10_000,
        tol: 1e-4,
        every: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{k} {v}: {e}");
        match k.as_str() {
            "--nx" => a.nx = v.parse().map_err(|e| bad(&e))?,
            "--ny" => a.ny = v.parse().map_err(|e| bad(&e))?,
            "--steps" => a.steps = v.parse().map_err(|e| bad(&e))?,
            "--tol" => a.tol = v.parse().map_err(|e| bad(&e))?,
            "--every" => a.every = v.parse().map_err(|e| bad(&e))?,
            _ => {
                return Err(format!(
                    "unknown option {k} (--nx --ny --steps --tol --every)"
                ));
            }
        }
    }
    if a.every == 0 {
        return Err("--every must be at least 1".into());
    }
    Ok(a)
}

/// `size = px · py` blocks of at least one cell each, with the fewest halo cells to exchange
/// (`(px − 1)·ny + (py − 1)·nx`; ties: fewer block rows).
fn process_grid(size: u32, nx: usize, ny: usize) -> Option<(u32, u32)> {
    (1..=size)
        .filter(|p| size.is_multiple_of(*p))
        .map(|px| (px, size / px))
        .filter(|&(px, py)| px as usize <= nx && py as usize <= ny)
        .min_by_key(|&(px, py)| (px as usize - 1) * ny + (py as usize - 1) * nx)
}

/// The part `[lo, hi)` of `n` cells that block `i` of `p` owns (the first `n % p` get one more).
fn block(n: usize, p: u32, i: u32) -> (usize, usize) {
    let (p, i) = (p as usize, i as usize);
    let (q, r) = (n / p, n % p);
    let lo = i * q + i.min(r);
    (lo, lo + q + usize::from(i < r))
}

/// Fixed value of boundary cell (`gi`, `gj`) (global coordinates, -1 or `nx`/`ny` on the edge).
fn boundary(gi: isize, gj: isize, nx: usize) -> f64 {
    if gi < 0 {
        1.0
    } else if gj < 0 && (gi as usize) < nx {
        1.0 - (gi as f64 + 1.0) / (nx as f64 + 1.0)
    } else {
        0.0
    }
}

/// Directions a halo message travels in, used as its tag.
const NORTH: usize = 0;
const SOUTH: usize = 1;
const WEST: usize = 2;
const EAST: usize = 3;

/// This rank's block with a one-cell halo: `(rows + 2) × (cols + 2)`, row-major.
struct Block {
    rows: usize,
    cols: usize,
    /// Neighbour rank in each direction (`None` on the grid's edge, where the halo holds the
    /// fixed boundary instead).
    nbr: [Option<u32>; 4],
    u: Vec<f64>,
    next: Vec<f64>,
}

impl Block {
    fn new(a: &Args, rank: u32, (px, py): (u32, u32)) -> Self {
        let (cx, cy) = (rank / py, rank % py);
        let (row0, row1) = block(a.nx, px, cx);
        let (col0, col1) = block(a.ny, py, cy);
        let (rows, cols) = (row1 - row0, col1 - col0);
        let at = |x: u32, y: u32| x * py + y;
        let nbr = [
            (cx > 0).then(|| at(cx - 1, cy)),
            (cx + 1 < px).then(|| at(cx + 1, cy)),
            (cy > 0).then(|| at(cx, cy - 1)),
            (cy + 1 < py).then(|| at(cx, cy + 1)),
        ];
        let mut u = vec![0.0; (rows + 2) * (cols + 2)];
        // Halo cells on the grid's edge hold the boundary (corners are never read).
        for i in 0..rows + 2 {
            for j in 0..cols + 2 {
                let (gi, gj) = ((row0 + i) as isize - 1, (col0 + j) as isize - 1);
                if gi < 0 || gj < 0 || gi as usize >= a.nx || gj as usize >= a.ny {
                    u[i * (cols + 2) + j] = boundary(gi, gj, a.nx);
                }
            }
        }
        Self {
            rows,
            cols,
            nbr,
            next: u.clone(),
            u,
        }
    }

    fn at(&self, i: usize, j: usize) -> usize {
        i * (self.cols + 2) + j
    }

    /// The owned cells next to the halo on side `dir`, as sent to that neighbour.
    fn edge(&self, dir: usize) -> Vec<f64> {
        let (r, c) = (self.rows, self.cols);
        match dir {
            NORTH => self.u[self.at(1, 1)..=self.at(1, c)].to_vec(),
            SOUTH => self.u[self.at(r, 1)..=self.at(r, c)].to_vec(),
            WEST => (1..=r).map(|i| self.u[self.at(i, 1)]).collect(),
            _ => (1..=r).map(|i| self.u[self.at(i, c)]).collect(),
        }
    }

    /// Stores a neighbour's edge into the halo on side `dir`.
    fn set_halo(&mut self, dir: usize, v: &[f64]) {
        let (r, c) = (self.rows, self.cols);
        match dir {
            NORTH => {
                let s = self.at(0, 1);
                self.u[s..s + c].copy_from_slice(v);
            }
            SOUTH => {
                let s = self.at(r + 1, 1);
                self.u[s..s + c].copy_from_slice(v);
            }
            _ => {
                let j = if dir == WEST { 0 } else { c + 1 };
                for (i, x) in (1..=r).zip(v) {
                    let k = self.at(i, j);
                    self.u[k] = *x;
                }
            }
        }
    }

    /// Exchanges halos with every neighbour: all receives and sends in flight at once. A message
    /// travelling north is tagged `NORTH`, so this rank receives its southern halo with that tag.
    fn exchange(&mut self, comm: &Communicator) -> rcomm::Result<()> {
        let send: [Vec<f64>; 4] = std::array::from_fn(|d| self.edge(d));
        let mut recv: [Vec<f64>; 4] = std::array::from_fn(|d| vec![0.0; send[d].len()]);
        let opposite = [SOUTH, NORTH, EAST, WEST];
        let nbr = self.nbr;
        comm.scope(|s| -> rcomm::Result<()> {
            let mut reqs = Vec::new();
            for (d, buf) in recv.iter_mut().enumerate() {
                if let Some(n) = nbr[d] {
                    reqs.push(s.irecv(buf, n, Tag(opposite[d] as i32))?);
                }
            }
            for (d, buf) in send.iter().enumerate() {
                if let Some(n) = nbr[d] {
                    reqs.push(s.isend(buf, n, Tag(d as i32))?);
                }
            }
            for r in reqs {
                r.wait()?;
            }
            Ok(())
        })?;
        for (d, v) in recv.iter().enumerate() {
            if self.nbr[d].is_some() {
                self.set_halo(d, v);
            }
        }
        Ok(())
    }

    /// One Jacobi step over the owned cells; returns the largest change.
    fn jacobi(&mut self) -> f64 {
        let w = self.cols + 2;
        let mut change = 0.0f64;
        for i in 1..=self.rows {
            for j in 1..=self.cols {
                let k = i * w + j;
                let u = &self.u;
                let v = 0.25 * ((u[k - w] + u[k + w]) + (u[k - 1] + u[k + 1]));
                change = change.max((v - u[k]).abs());
                self.next[k] = v;
            }
        }
        std::mem::swap(&mut self.u, &mut self.next);
        change
    }

    /// Owned cells in row-major order.
    fn cells(&self) -> impl Iterator<Item = f64> + '_ {
        (1..=self.rows).flat_map(move |i| (1..=self.cols).map(move |j| self.u[self.at(i, j)]))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let world = rcomm::init()?;
    let args = parse_args()?;
    let (rank, size) = (world.rank(), world.size());
    let dims = process_grid(size, args.nx, args.ny).ok_or_else(|| {
        format!(
            "a {}x{} grid is too small for {size} ranks",
            args.nx, args.ny
        )
    })?;
    let mut b = Block::new(&args, rank, dims);
    if rank == 0 {
        println!(
            "heat: {}x{} grid on {size} ranks ({}x{} blocks), at most {} steps, tolerance {:e}, \
             residual every {} steps",
            args.nx, args.ny, dims.0, dims.1, args.steps, args.tol, args.every
        );
    }
    let t0 = std::time::Instant::now();
    let (mut steps, mut residual) = (0, f64::INFINITY);
    let mut change = 0.0f64;
    while steps < args.steps {
        b.exchange(&world)?;
        change = change.max(b.jacobi());
        steps += 1;
        if steps % args.every == 0 || steps == args.steps {
            // The largest change of any cell since the last check, over the whole grid.
            let mut r = [change];
            world.allreduce_in_place(&mut r, Op::Max)?;
            (residual, change) = (r[0], 0.0);
            if rank == 0 && steps % (args.every * 50) == 0 {
                println!("step {steps}: residual {residual:e}");
            }
            if residual < args.tol {
                break;
            }
        }
    }
    // Decomposition-independent results: a floating-point sum and an exact fixed-point one.
    let mut sum = [b.cells().sum::<f64>()];
    world.allreduce_in_place(&mut sum, Op::Sum)?;
    let mut check = [b
        .cells()
        .map(|v| (v * (1u64 << 40) as f64).round() as i64)
        .fold(0i64, i64::wrapping_add)];
    world.allreduce_in_place(&mut check, Op::Sum)?;
    if rank == 0 {
        println!(
            "heat result: steps {steps} residual {residual:e} sum {:.15e} checksum {:016x} \
             ({:.3} s)",
            sum[0],
            check[0],
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
