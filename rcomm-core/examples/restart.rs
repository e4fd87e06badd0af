//! Checkpoint and resume under `rcomm-run --max-restarts`.
//!
//! Every rank runs STEPS steps of a toy iteration (`x ← x/2 + allreduce-sum of the ranks' x`,
//! seeded by the rank) and writes a checkpoint (step and x) every EVERY steps. After a failure
//! `rcomm-run` starts the whole job again with `RCOMM_RESTART_COUNT` = 1, 2, …; each rank then
//! resumes from its last checkpoint instead of step 0, and the result is the same as an
//! uninterrupted run.
//!
//! ```sh
//! rcomm-run -n 4 --max-restarts 1 target/release/examples/restart /tmp/ckpt 40 5 --fail-at 23
//! ```
//!
//! `--fail-at S` makes rank 1 die at step S in the first run only (to show the restart). Rank 0
//! prints `resumed from step K` when it resumed, and `result X after S steps` at the end.
use rcomm::Op;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let world = rcomm::init()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: restart DIR STEPS EVERY [--fail-at S]";
    let dir = PathBuf::from(args.first().ok_or(usage)?);
    let steps: u64 = args.get(1).ok_or(usage)?.parse()?;
    let every: u64 = args.get(2).ok_or(usage)?.parse()?;
    let fail_at: Option<u64> = match args.get(3).map(String::as_str) {
        Some("--fail-at") => Some(args.get(4).ok_or(usage)?.parse()?),
        Some(a) => return Err(format!("unknown argument {a:?}; {usage}").into()),
        None => None,
    };
    let r = world.rank();
    std::fs::create_dir_all(&dir)?;
    let ckpt = dir.join(format!("rank{r}.ckpt"));

    // A fresh start ignores old checkpoints; a restart resumes from the newest one every rank
    // has (ranks may have checkpointed different steps if one died between two writes).
    let (mut step, mut x) = (0u64, f64::from(r + 1));
    if world.restart_count() > 0
        && let Ok(text) = std::fs::read_to_string(&ckpt)
    {
        let (s, v) = text.trim().split_once(' ').ok_or("bad checkpoint")?;
        (step, x) = (s.parse()?, v.parse()?);
    }
    let mut oldest = [step];
    world.allreduce_in_place(&mut oldest, Op::Min)?;
    if oldest[0] != step {
        return Err(format!(
            "rank {r} checkpointed step {step} but another only {}: keep two checkpoints to resume from mixed steps",
            oldest[0]
        )
        .into());
    }
    if step > 0 && r == 0 {
        println!("resumed from step {step}");
    }
    while step < steps {
        if fail_at == Some(step) && r == 1 && world.restart_count() == 0 {
            eprintln!("rank 1: failing at step {step} on purpose");
            std::process::abort();
        }
        let mut sum = [x];
        world.allreduce_in_place(&mut sum, Op::Sum)?;
        x = x / 2.0 + sum[0] / f64::from(world.size());
        step += 1;
        if step % every == 0 {
            // Write then rename: a rank killed mid-write leaves the previous checkpoint whole.
            let tmp = ckpt.with_extension("tmp");
            std::fs::write(&tmp, format!("{step} {x:e}"))?;
            std::fs::rename(&tmp, &ckpt)?;
        }
    }
    let mut total = [x];
    world.allreduce_in_place(&mut total, Op::Sum)?;
    if r == 0 {
        println!("result {:.12e} after {step} steps", total[0]);
    }
    Ok(())
}
