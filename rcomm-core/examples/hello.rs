//! Each rank prints its rank, the world size, its host and the peers it learnt about through the
//! launcher's key-value store. Run: `rcomm-run -n 4 target/release/examples/hello`.

fn main() {
    let world = match rcomm::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("hello: {e}");
            std::process::exit(1);
        }
    };
    let peers: Vec<String> = (0..world.size())
        .filter(|&r| r != world.rank())
        .map(|r| {
            let p = world.peer(r).expect("rank in range");
            let place = if world.same_node(r).unwrap_or(false) {
                "this node"
            } else {
                "remote"
            };
            format!("{r}@{}/pid{} ({place})", p.hostname, p.pid)
        })
        .collect();
    println!(
        "hello from rank {} of {} on {} (local rank {} of {}, job {}); peers: {}",
        world.rank(),
        world.size(),
        world.hostname(),
        world.local_rank(),
        world.local_size(),
        world.job_id(),
        if peers.is_empty() {
            "none".into()
        } else {
            peers.join(", ")
        }
    );
}
