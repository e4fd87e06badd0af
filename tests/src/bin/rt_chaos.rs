//! Rank program for the fault loop: mixed collectives and point-to-point, results checked,
//! until an operation fails (a rank was killed from outside) or SECS seconds pass. On failure a
//! rank prints `error at MS: <error>` (MS: milliseconds since the Unix epoch) and exits 0; at the
//! time limit it prints `done N` (rounds).
use rcomm::{Op, Tag};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

fn main() {
    // The kill may land while the ranks are still starting: a survivor's init then fails
    // naming the killed rank, which is as much a reported failure as a failed collective.
    let w = match rcomm::init() {
        Ok(w) => w,
        Err(e) => {
            println!("error at {}: {e}", now_ms());
            return;
        }
    };
    let (r, n) = (w.rank(), w.size());
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    println!("ready");
    let t0 = Instant::now();
    let mut round = 0u64;
    let result = (|| -> rcomm::Result<()> {
        while t0.elapsed() < Duration::from_secs(secs) {
            let k = round % 6;
            match k {
                0 => {
                    let mut v = vec![u64::from(r) + round; 7];
                    w.allreduce_in_place(&mut v, Op::Sum)?;
                    let want = u64::from(n * (n - 1) / 2) + round * u64::from(n);
                    assert!(v.iter().all(|&x| x == want), "allreduce small");
                }
                1 => {
                    let mut v = vec![1.0f32; 300_000];
                    w.allreduce_in_place(&mut v, Op::Sum)?;
                    assert!(v.iter().all(|&x| x == n as f32), "allreduce large");
                }
                2 => {
                    let root = (round % u64::from(n)) as u32;
                    let mut v = vec![if r == root { round } else { 0 }; 5000];
                    w.bcast(&mut v, root)?;
                    assert!(v.iter().all(|&x| x == round), "bcast");
                }
                3 => {
                    let mut got = vec![0u32; 100 * n as usize];
                    w.allgather(&[r; 100], &mut got)?;
                    let want: Vec<u32> = (0..n).flat_map(|q| [q; 100]).collect();
                    assert_eq!(got, want, "allgather");
                }
                4 => {
                    let send: Vec<u32> = (0..n).flat_map(|q| [r * 1000 + q; 50]).collect();
                    let mut got = vec![0u32; send.len()];
                    w.alltoall(&send, &mut got)?;
                    let want: Vec<u32> = (0..n).flat_map(|q| [q * 1000 + r; 50]).collect();
                    assert_eq!(got, want, "alltoall");
                }
                _ => {
                    let (to, from) = ((r + 1) % n, (r + n - 1) % n);
                    let mut b = vec![0u8; 100_000];
                    w.sendrecv(&vec![r as u8; 100_000], to, Tag(3), &mut b, from, Tag(3))?;
                    assert!(b.iter().all(|&x| x == from as u8), "ring");
                }
            }
            round += 1;
        }
        Ok(())
    })();
    match result {
        Ok(()) => println!("done {round}"),
        Err(e) => println!("error at {}: {e}", now_ms()),
    }
}
