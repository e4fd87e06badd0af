//! The planner against numbers worked out by hand (in the comments), and the two cluster
//! cases of the issue: 70B on 8 × 8 GPUs, GPT-3 175B on 16 × 8.

use super::*;

/// Equal within a relative 1e-12 (the hand values are exact decimals; f64 rounding is not).
#[track_caller]
fn close(got: f64, want: f64) {
    let tol = 1e-12 * want.abs().max(1e-300);
    assert!((got - want).abs() <= tol, "got {got}, want {want}");
}

/// 2 nodes × 8 GPUs; intra 100 GB/s and 1 µs, inter 10 GB/s and 5 µs; 80 GB per GPU.
fn two_nodes() -> Cluster {
    Cluster {
        nodes: 2,
        gpus_per_node: 8,
        intra: Link {
            latency_s: 1e-6,
            bandwidth: 100e9,
        },
        inter: Link {
            latency_s: 5e-6,
            bandwidth: 10e9,
        },
        gpu_mem_bytes: 80e9,
    }
}

/// 7B parameters, 32 layers, h 4096, s 2048, b 1, G 16, 2 bytes.
fn seven_b() -> Model {
    Model::new(7e9, 32, 4096, 2048, 16)
}

fn layout(tp: u64, pp: u64, dp: u64) -> Layout {
    Layout { tp, pp, dp, ep: 1 }
}

const TP_WARNING_16: &str =
    "TP=16 crosses nodes: every layer's all-reduce rides the inter-node link";

#[test]
fn collective_prices_follow_the_documented_formulas() {
    let l = Link {
        latency_s: 2e-6,
        bandwidth: 1e9,
    };
    // Ring all-reduce, 8 ranks, 1 MB: 2·7·2 µs + 2·7/8 · 1e6/1e9 s = 28 µs + 1750 µs.
    close(price(Collective::Allreduce, 8, 1e6, l), 1778e-6);
    // All-gather and all-to-all, 8 ranks, 1 MB: 7·2 µs + 7/8 ms = 889 µs.
    close(price(Collective::Allgather, 8, 1e6, l), 889e-6);
    close(price(Collective::Alltoall, 8, 1e6, l), 889e-6);
    // Point-to-point: 2 µs + 1 ms.
    close(price(Collective::P2p, 2, 1e6, l), 1002e-6);
    // Nothing to do costs nothing.
    assert_eq!(price(Collective::Allreduce, 1, 1e6, l), 0.0);
    assert_eq!(price(Collective::Allreduce, 8, 0.0, l), 0.0);
    assert_eq!(price(Collective::P2p, 2, 0.0, l), 0.0);
    assert_eq!("sendrecv".parse::<Collective>().unwrap(), Collective::P2p);
    // The reduction term, by hand: 8 ranks fold 7/8 of 1 MB at 1 GB/s = 875 µs more for the
    // all-reduce and the reduce-scatter, nothing for the others.
    close(
        price_with(Collective::Allreduce, 8, 1e6, l, Some(1e9)),
        1778e-6 + 875e-6,
    );
    close(
        price_with(Collective::ReduceScatter, 8, 1e6, l, Some(1e9)),
        889e-6 + 875e-6,
    );
    close(
        price_with(Collective::Allgather, 8, 1e6, l, Some(1e9)),
        889e-6,
    );
    close(price_with(Collective::Allreduce, 8, 1e6, l, None), 1778e-6);
    // The local terms by hand: a 0.5 µs call overhead on every collective but p2p; the
    // all-to-all's own block, 1 MB / 8 at 0.5 GB/s = 250 µs; a copy rate changes no other
    // operation, and nothing to do still costs nothing.
    let loc = Local {
        reduce_bw: Some(1e9),
        copy_bw: Some(0.5e9),
        call_overhead_s: 0.5e-6,
    };
    close(
        price_local(Collective::Allreduce, 8, 1e6, l, &loc),
        1778e-6 + 875e-6 + 0.5e-6,
    );
    close(
        price_local(Collective::Alltoall, 8, 1e6, l, &loc),
        889e-6 + 250e-6 + 0.5e-6,
    );
    close(
        price_local(Collective::Allgather, 8, 1e6, l, &loc),
        889e-6 + 0.5e-6,
    );
    close(
        price_local(Collective::P2p, 2, 1e6, l, &loc),
        price(Collective::P2p, 2, 1e6, l),
    );
    assert_eq!(price_local(Collective::Alltoall, 1, 1e6, l, &loc), 0.0);
    assert_eq!(price_local(Collective::Alltoall, 8, 0.0, l, &loc), 0.0);
    assert_eq!(
        price_local(Collective::Alltoall, 8, 1e6, l, &Local::default()),
        price(Collective::Alltoall, 8, 1e6, l)
    );
    assert_eq!(
        "reduce_scatter".parse::<Collective>().unwrap(),
        Collective::ReduceScatter
    );
    assert!("bcast".parse::<Collective>().is_err());
}

#[test]
fn tp4_pp2_dp2_on_two_nodes_matches_the_hand_computation() {
    let e = estimate(&two_nodes(), &seven_b(), layout(4, 2, 2)).unwrap();
    // A = b·s·h·bytes = 1·2048·4096·2 = 16 777 216 B; m = 16/(2·1) = 8; L_s = 32/2 = 16.
    assert_eq!(e.micro_batches, 8);
    // Placement r = t + 4·(p + 2·d): TP groups 0–3, 4–7, … stay on a node; stage boundaries
    // 0–3 → 4–7 (node 0) and 8–11 → 12–15 (node 1) too; DP pairs r, r + 8 cross.
    assert_eq!(
        e.crosses,
        Crossing {
            tp: false,
            pp: false,
            dp: true,
            ep: false,
            edp: true
        }
    );
    // TP: allreduce(4, A, intra) = 2·3·1 µs + 2·3/4 · 16 777 216 / 1e11
    //   = 6e-6 + 2.5165824e-4 = 2.5765824e-4 s; × 4 per layer × 16 layers × 8 micro-batches
    //   = 512 × 2.5765824e-4 = 0.13192101888 s.
    close(e.tp_time_s, 0.13192101888);
    // PP: p2p(A, intra) = 1 µs + 1.6777216e-4 = 1.6877216e-4; × 2 × 8 = 2.70035456e-3 s.
    close(e.pp_time_s, 2.70035456e-3);
    assert_eq!(e.ep_time_s, 0.0);
    // DP: W = 7e9/(4·2)·2 = 1.75e9 B; allreduce(2, W, inter) = 2·1·5 µs + 2·1/2 · 1.75e9/1e10
    //   = 1e-5 + 0.175 = 0.17501 s.
    close(e.dp_time_s, 0.17501);
    // bubble = (2 − 1)/(8 + 2 − 1) = 1/9.
    close(e.bubble, 1.0 / 9.0);
    // comm = (0.13192101888 + 0.00270035456) · 9/8 + 0.17501
    //      = 0.15144904512 + 0.17501 = 0.32645904512 s.
    close(e.comm_time_s, 0.32645904512);
    assert_eq!((e.compute_time_s, e.step_time_s), (None, None));
    // Memory: 7e9/8 = 8.75e8 parameters per GPU: weights and gradients 1.75e9 B each,
    // optimizer 12 × 8.75e8 = 1.05e10 B; activations min(2, 8) = 2 micro-batches × 16 layers
    // × 17·2·2048·1·4096/4 = 71 303 168 B = 2 281 701 376 B; total 16 281 701 376 B.
    close(e.memory.weights, 1.75e9);
    close(e.memory.grads, 1.75e9);
    close(e.memory.optimizer, 1.05e10);
    close(e.memory.activations, 2_281_701_376.0);
    close(e.mem_per_gpu_bytes(), 16_281_701_376.0);
    assert!(e.fits);
    assert!(e.warnings.is_empty(), "{:?}", e.warnings);
}

#[test]
fn tflops_add_compute_stretched_by_the_bubble() {
    let model = Model {
        tflops: Some(100.0),
        ..seven_b()
    };
    let e = estimate(&two_nodes(), &model, layout(4, 2, 2)).unwrap();
    // compute = m · 6·P·b·s/(tp·pp·F) = 8 · 6·7e9·2048/(8·1e14) = 8 × 0.10752 = 0.86016 s.
    close(e.compute_time_s.unwrap(), 0.86016);
    // step = (0.86016 + 0.13192101888 + 0.00270035456) · 9/8 + 0.17501 = 1.29413904512 s.
    close(e.step_time_s.unwrap(), 1.29413904512);
    close(e.key(), 1.29413904512);
    // The communication estimate does not change.
    close(e.comm_time_s, 0.32645904512);
}

#[test]
fn zero_stages_shard_optimizer_then_gradients_then_weights() {
    let at = |zero| {
        let m = Model { zero, ..seven_b() };
        estimate(&two_nodes(), &m, layout(4, 2, 2)).unwrap()
    };
    // dp = 2: ZeRO-1 halves the optimizer state (1.05e10 → 5.25e9), ZeRO-2 also the
    // gradients (1.75e9 → 8.75e8), ZeRO-3 also the weights.
    let m = |e: &Estimate| (e.memory.weights, e.memory.grads, e.memory.optimizer);
    assert_eq!(m(&at(0)), (1.75e9, 1.75e9, 1.05e10));
    assert_eq!(m(&at(1)), (1.75e9, 1.75e9, 5.25e9));
    assert_eq!(m(&at(2)), (1.75e9, 8.75e8, 5.25e9));
    assert_eq!(m(&at(3)), (8.75e8, 8.75e8, 5.25e9));
    // ZeRO-1/2 communicate as much as plain DP; ZeRO-3 adds allgather(2, 1.75e9, inter)
    // = 5 µs + 1/2 · 0.175 = 0.087505 s: 0.17501 + 0.087505 = 0.262515 s.
    for z in 0..3 {
        close(at(z).dp_time_s, 0.17501);
    }
    close(at(3).dp_time_s, 0.262515);
}

#[test]
fn tp16_across_two_nodes_is_priced_on_the_inter_node_link_and_flagged() {
    let e = estimate(&two_nodes(), &seven_b(), layout(16, 1, 1)).unwrap();
    // allreduce(16, A, inter) = 2·15·5 µs + 2·15/16 · 16 777 216 / 1e10
    //   = 1.5e-4 + 3.145728e-3 = 3.295728e-3 s; m = 16, 32 layers, 4 per layer:
    //   2048 × 3.295728e-3 = 6.749650944 s. No PP, no DP, no bubble.
    assert!(e.crosses.tp);
    close(e.tp_time_s, 6.749650944);
    close(e.comm_time_s, 6.749650944);
    assert_eq!((e.pp_time_s, e.dp_time_s, e.bubble), (0.0, 0.0, 0.0));
    // 16 B × 7e9/16 = 7e9 B, activations 32 × 17·2·2048·4096/16 = 570 425 344 B.
    close(e.mem_per_gpu_bytes(), 7_570_425_344.0);
    assert_eq!(e.warnings, [TP_WARNING_16]);
}

#[test]
fn a_layout_over_the_memory_budget_is_kept_flagged_and_ranked_last() {
    let c = two_nodes();
    let e = estimate(&c, &seven_b(), layout(1, 1, 16)).unwrap();
    // 16 B × 7e9 = 1.12e11 B plus 32 × 17·2·2048·4096 = 9 126 805 504 B of activations.
    close(e.mem_per_gpu_bytes(), 121_126_805_504.0);
    assert!(!e.fits);
    assert_eq!(e.warnings, ["needs 121 GB per GPU, over the 80 GB budget"]);
    let plan = plan(&c, &seven_b()).unwrap();
    let first_unfit = plan.ranked.iter().position(|e| !e.fits).unwrap();
    assert!(plan.ranked[first_unfit..].iter().all(|e| !e.fits));
    assert!(plan.ranked[..first_unfit].iter().all(|e| e.fits));
    assert_eq!(plan.ranked.last().unwrap().layout, layout(1, 1, 16));
}

#[test]
fn a_bubble_over_half_the_step_is_flagged() {
    // G = 4 on PP16: m = 4, bubble = 15/(4 + 15) = 15/19.
    let model = Model::new(7e9, 32, 4096, 2048, 4);
    let e = estimate(&two_nodes(), &model, layout(1, 16, 1)).unwrap();
    close(e.bubble, 15.0 / 19.0);
    assert!(
        e.warnings
            .iter()
            .any(|w| w.starts_with("pipeline bubble 79 % (16 stages, 4 micro-batches)")),
        "{:?}",
        e.warnings
    );
    // Stage boundaries 7 → 8 join the two nodes: the pipeline is priced on the inter link,
    // p2p = 5 µs + 16 777 216 / 1e10 = 1.6827216e-3 s, × 2 × 4 = 0.0134617728 s.
    assert!(e.crosses.pp);
    close(e.pp_time_s, 0.0134617728);
}

#[test]
fn experts_add_all_to_alls_and_split_the_gradient_all_reduce() {
    let model = Model {
        experts: 2,
        ..seven_b()
    };
    // Expert share 8·2/(4 + 8·2) = 0.8: P_e = 5.6e9, P_d = 1.4e9.
    close(model.expert_fraction(), 0.8);
    let e = estimate(
        &two_nodes(),
        &model,
        Layout {
            tp: 4,
            pp: 2,
            dp: 2,
            ep: 2,
        },
    )
    .unwrap();
    // EP pairs r, r + 8 cross nodes: alltoall(2, A, inter) = 5 µs + 1/2 · 16 777 216/1e10
    //   = 8.438608e-4 s; × 4 × 16 layers × 8 micro-batches = 0.4320567296 s.
    assert!(e.crosses.ep);
    close(e.ep_time_s, 0.4320567296);
    // DP: dense W_d = 1.4e9/8·2 = 3.5e8 B over dp = 2 (inter): 1e-5 + 0.035 = 0.03501 s;
    // expert weights are replicated dp/ep = 1 times: no all-reduce.
    close(e.dp_time_s, 0.03501);
    // comm = (0.13192101888 + 0.00270035456 + 0.4320567296) · 9/8 + 0.03501 = 0.67252286592.
    close(e.comm_time_s, 0.67252286592);
    // Per GPU 1.4e9/8 + 5.6e9/16 = 5.25e8 parameters: 16 B each = 8.4e9, plus 2 281 701 376 B.
    close(e.mem_per_gpu_bytes(), 10_681_701_376.0);
    assert_eq!(
        e.warnings,
        ["EP=2 crosses nodes: every layer's all-to-all rides the inter-node link"]
    );
    // ep = 1: no all-to-all, and the expert gradients (W_e = 5.6e9/8·2 = 1.4e9 B) join the
    // all-reduce over the same 2 ranks: 0.03501 + 1e-5 + 0.14 = 0.17502 s.
    let e1 = estimate(
        &two_nodes(),
        &model,
        Layout {
            tp: 4,
            pp: 2,
            dp: 2,
            ep: 1,
        },
    )
    .unwrap();
    assert_eq!(e1.ep_time_s, 0.0);
    close(e1.dp_time_s, 0.17502);
    // With TFLOP/s: active parameters 1.4e9 + 5.6e9 · 1/2 = 4.2e9:
    // compute = 8 · 6·4.2e9·2048/(8·1e14) = 0.516096 s.
    let m = Model {
        tflops: Some(100.0),
        ..model
    };
    let e = estimate(
        &two_nodes(),
        &m,
        Layout {
            tp: 4,
            pp: 2,
            dp: 2,
            ep: 2,
        },
    )
    .unwrap();
    close(e.compute_time_s.unwrap(), 0.516096);
}

#[test]
fn layouts_that_break_a_divisibility_rule_are_dropped_with_the_reason() {
    let c = two_nodes();
    let model = Model {
        heads: Some(24),
        ..Model::new(7e9, 24, 3072, 2048, 16)
    };
    let plan = plan(&c, &model).unwrap();
    for e in &plan.ranked {
        let l = e.layout;
        assert_eq!(l.tp * l.pp * l.dp, 16);
        assert!(3072 % l.tp == 0 && 24 % l.tp == 0 && 24 % l.pp == 0, "{l}");
    }
    // tp = 16 divides 3072 but not 24 heads; pp = 16 does not divide 24 layers.
    assert!(
        plan.dropped
            .contains(&(layout(16, 1, 1), Infeasible::TpHeads))
    );
    assert!(
        plan.dropped
            .contains(&(layout(1, 16, 1), Infeasible::PpLayers))
    );
    let s = plan.dropped_summary();
    assert!(s.contains("pp does not divide the layers"), "{s}");
    assert_eq!(
        estimate(&c, &model, layout(4, 2, 4)),
        Err(Infeasible::Product)
    );
    // G = 16 and b = 3: no dp divides.
    let odd = Model {
        micro_batch: 3,
        ..seven_b()
    };
    assert_eq!(estimate(&c, &odd, layout(4, 2, 2)), Err(Infeasible::Batch));
}

#[test]
fn no_feasible_layout_is_an_error_that_says_why() {
    // Hidden 3 and 3 layers on 16 GPUs: tp = pp = 1, so dp = 16, which a batch of 1 cannot feed.
    let model = Model::new(1e6, 3, 3, 16, 1);
    let e = plan(&two_nodes(), &model).unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, PlanError::NoLayout(_)), "{s}");
    assert!(s.contains("global batch"), "{s}");
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let c = two_nodes();
    for (model, flag) in [
        (Model::new(0.0, 32, 4096, 2048, 16), "--params"),
        (Model::new(f64::NAN, 32, 4096, 2048, 16), "--params"),
        (Model::new(7e9, 0, 4096, 2048, 16), "--layers"),
        (Model::new(7e9, 32, 4096, 2048, 0), "--global-batch"),
        (
            Model {
                zero: 4,
                ..seven_b()
            },
            "--zero",
        ),
        (
            Model {
                bytes_per_param: 0,
                ..seven_b()
            },
            "--bytes-per-param",
        ),
        (
            Model {
                tflops: Some(-1.0),
                ..seven_b()
            },
            "--tflops",
        ),
        (
            Model {
                experts: 4,
                top_k: 5,
                ..seven_b()
            },
            "--top-k",
        ),
        (
            Model {
                micro_batch: 32,
                ..seven_b()
            },
            "--global-batch",
        ),
    ] {
        let e = plan(&c, &model).unwrap_err().to_string();
        assert!(e.contains(flag), "{flag}: {e}");
    }
    assert_eq!(
        estimate(&c, &Model::new(7e9, 32, 4096, 2048, 0), layout(4, 2, 2)),
        Err(Infeasible::Invalid)
    );
    assert_eq!(
        estimate(
            &Cluster {
                gpus_per_node: 0,
                ..c
            },
            &seven_b(),
            layout(4, 2, 2)
        ),
        Err(Infeasible::Invalid)
    );
    for (cluster, flag) in [
        (Cluster { nodes: 0, ..c }, "--nodes"),
        (
            Cluster {
                gpus_per_node: 0,
                ..c
            },
            "--gpus-per-node",
        ),
        (
            Cluster {
                nodes: 1 << 20,
                ..c
            },
            "GPUs",
        ),
        (
            Cluster {
                gpu_mem_bytes: 0.0,
                ..c
            },
            "--gpu-mem",
        ),
        (
            Cluster {
                inter: Link {
                    latency_s: 1e-6,
                    bandwidth: 0.0,
                },
                ..c
            },
            "--inter-bw",
        ),
    ] {
        let e = plan(&cluster, &seven_b()).unwrap_err().to_string();
        assert!(e.contains(flag), "{flag}: {e}");
    }
}

#[test]
fn cluster_pairs_parse_units_let_later_pairs_win_and_name_what_is_missing() {
    let mut pairs = vec![
        ("nodes", "8"),
        ("gpus_per_node", "8"),
        ("intra-bw", "900GB/s"),
        ("inter-bw", "400Gb/s"),
        ("intra-lat", "1us"),
        ("inter-lat", "5us"),
    ];
    let c = Cluster::from_pairs(pairs.clone()).unwrap();
    assert_eq!(c.gpus(), 64);
    assert_eq!(
        c.intra,
        Link {
            latency_s: 1e-6,
            bandwidth: 900e9
        }
    );
    assert_eq!(
        c.inter,
        Link {
            latency_s: 5e-6,
            bandwidth: 50e9
        }
    );
    assert_eq!(c.gpu_mem_bytes, DEFAULT_GPU_MEM);
    pairs.push(("nodes", "16"));
    pairs.push(("gpu-mem", "141GB"));
    let c = Cluster::from_pairs(pairs.clone()).unwrap();
    assert_eq!((c.nodes, c.gpu_mem_bytes), (16, 141e9));

    let e = Cluster::from_pairs(pairs[1..6].to_vec()).unwrap_err();
    assert_eq!(
        e,
        PlanError::Missing("--nodes (or `nodes = …` in the topology file)".into())
    );
    let e = Cluster::from_pairs([("gpus", "8")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown cluster key `gpus`") && e.contains("gpus-per-node"),
        "{e}"
    );
    let mut bad = pairs.clone();
    bad.push(("inter-lat", "5"));
    let e = Cluster::from_pairs(bad).unwrap_err().to_string();
    assert!(e.contains("--inter-lat") && e.contains("no unit"), "{e}");
    let mut bad = pairs;
    bad.push(("nodes", "eight"));
    let e = Cluster::from_pairs(bad).unwrap_err().to_string();
    assert!(e.contains("--nodes") && e.contains("whole number"), "{e}");
}

#[test]
fn group_crossing_follows_the_placement_for_groups_that_straddle_nodes() {
    // 3 nodes × 4 GPUs = 12; TP 3 groups {0,1,2} {3,4,5}: the second straddles nodes 0 and 1.
    let c = Cluster {
        nodes: 3,
        gpus_per_node: 4,
        ..two_nodes()
    };
    let m = Model::new(1e9, 12, 1536, 1024, 12);
    let e = estimate(&c, &m, layout(3, 1, 4)).unwrap();
    assert!(e.crosses.tp && e.crosses.dp);
    // TP 2 × PP 2 × DP 3: TP pairs stay within a node, stage boundaries (r, r + 2) too:
    // r = 0 → 2, 4 → 6, 8 → 10.
    let e = estimate(&c, &m, layout(2, 2, 3)).unwrap();
    assert!(!e.crosses.tp && !e.crosses.pp && e.crosses.dp);
    // One node: nothing crosses.
    let one = Cluster {
        nodes: 1,
        gpus_per_node: 12,
        ..c
    };
    let e = estimate(&one, &m, layout(3, 2, 2)).unwrap();
    assert_eq!(e.crosses, Crossing::default());
}

/// The 64-GPU cluster: 8 nodes × 8, 900 GB/s and 1 µs inside, 50 GB/s and 5 µs between.
fn dgx(nodes: u64) -> Cluster {
    Cluster {
        nodes,
        gpus_per_node: 8,
        intra: Link {
            latency_s: 1e-6,
            bandwidth: 900e9,
        },
        inter: Link {
            latency_s: 5e-6,
            bandwidth: 50e9,
        },
        gpu_mem_bytes: 80e9,
    }
}

#[test]
fn on_64_gpus_tp8_pp4_dp2_ranks_above_every_tp16_layout_and_tp16_is_flagged() {
    // 70B, 80 layers, h 8192, s 4096, b 1, G 512, 2 bytes (the command).
    let model = Model::new(70e9, 80, 8192, 4096, 512);
    let plan = plan(&dgx(8), &model).unwrap();
    let pos = |l: Layout| plan.ranked.iter().position(|e| e.layout == l).unwrap();
    let good = pos(layout(8, 4, 2));
    assert!(plan.ranked[good].fits);
    assert!(
        plan.ranked[good].warnings.is_empty(),
        "{:?}",
        plan.ranked[good].warnings
    );
    let tp16: Vec<_> = plan.ranked.iter().filter(|e| e.layout.tp >= 16).collect();
    assert!(!tp16.is_empty());
    for e in tp16 {
        assert!(
            pos(e.layout) > good,
            "{} ranks above TP8 × PP4 × DP2",
            e.layout
        );
        assert!(e.crosses.tp);
        assert!(
            e.warnings.iter().any(|w| w
                == &format!(
                    "TP={} crosses nodes: every layer's all-reduce rides the inter-node link",
                    e.layout.tp
                )),
            "{}: {:?}",
            e.layout,
            e.warnings
        );
    }
    assert!(
        plan.ranked
            .iter()
            .any(|e| e.warnings.iter().any(|w| w == TP_WARNING_16))
    );
    // The best layout keeps TP inside a node.
    assert!(plan.ranked[0].layout.tp <= 8 && plan.ranked[0].fits);
    // TP8 × PP4 × DP2 by hand: A = 4096·8192·2 = 67 108 864 B, m = 256, L_s = 20.
    // TP: allreduce(8, A, intra) = 14 µs + 1.75 · 67 108 864 / 9e11 = 1.44494791…e-4 s;
    //   × 4 × 20 × 256 = 2.959253…s.
    let e = &plan.ranked[good];
    close(
        e.tp_time_s,
        256.0 * 20.0 * 4.0 * (14e-6 + 1.75 * 67_108_864.0 / 900e9),
    );
    // PP: boundaries r → r + 8 change node: p2p = 5 µs + 67 108 864/5e10; × 2 × 256.
    close(e.pp_time_s, 512.0 * (5e-6 + 67_108_864.0 / 50e9));
    // DP: 70e9/32·2 = 4.375e9 B over 2 ranks on two nodes: 10 µs + 4.375e9/5e10 = 0.08751 s.
    close(e.dp_time_s, 0.08751);
    close(e.bubble, 3.0 / 259.0);
}

#[test]
fn on_128_gpus_gpt3_keeps_tp_within_a_node_and_pipelines() {
    // GPT-3 175B: 96 layers, h 12288, 96 heads, s 2048, b 1, G 1536, on 16 nodes × 8 GPUs.
    // A layer (12h² = 1.81e9 parameters, 16 B each: 29 GB) fits 4 GPUs of 80 GB; the model
    // (2.8 TB) does not fit a node (640 GB), so pipelining is needed.
    let model = Model {
        heads: Some(96),
        ..Model::new(175e9, 96, 12288, 2048, 1536)
    };
    let layer = 12.0 * 12288f64.powi(2) * 16.0;
    assert!(layer / 4.0 < 80e9 && 175e9 * 16.0 > 8.0 * 80e9);
    let plan = plan(&dgx(16), &model).unwrap();
    let best = &plan.ranked[0];
    assert!(best.fits, "{:?}", best);
    assert!(
        best.layout.tp <= 8 && best.layout.pp > 1,
        "best: {}",
        best.layout
    );
    // Without pipelining nothing fits: at most tp = 32 of 96 heads gives 16 B × 175e9/32 =
    // 87.5 GB per GPU before activations.
    for e in plan.ranked.iter().filter(|e| e.layout.pp == 1) {
        assert!(!e.fits, "{}", e.layout);
    }
    // Every layout that fits ranks above every one that does not (checked by the sort) and
    // the top few all keep TP inside a node.
    // Every layout with TP inside a node that fits ranks above every TP16+ layout.
    let last_good = plan
        .ranked
        .iter()
        .rposition(|e| e.fits && e.layout.tp <= 8)
        .unwrap();
    let first_wide = plan.ranked.iter().position(|e| e.layout.tp > 8).unwrap();
    assert!(last_good < first_wide);
}

#[test]
fn json_lists_the_required_fields_best_first() {
    let plan = plan(&dgx(8), &Model::new(70e9, 80, 8192, 4096, 512)).unwrap();
    let j = to_json(&plan.ranked);
    assert!(j.starts_with("[\n  {\"tp\":") && j.ends_with("}\n]"));
    assert_eq!(j.lines().count(), plan.ranked.len() + 2);
    for (line, e) in j.lines().skip(1).zip(&plan.ranked) {
        // The fields before `crosses_nodes` (which has its own tp, pp, dp, ep).
        let (head, tail) = line.split_once("\"crosses_nodes\":").unwrap();
        let l = e.layout;
        for key in [
            format!(
                "{{\"tp\":{},\"pp\":{},\"dp\":{},\"ep\":{},",
                l.tp, l.pp, l.dp, l.ep
            ),
            format!("\"comm_time_s\":{},", e.comm_time_s),
            format!("\"bubble\":{},", e.bubble),
            format!("\"mem_per_gpu_bytes\":{},", e.mem_per_gpu_bytes().round()),
        ] {
            assert!(head.contains(&key), "{key} not in {line}");
        }
        assert!(tail.contains("\"warnings\":["), "{line}");
    }
    assert!(j.contains(&format!("\"warnings\":[\"{TP_WARNING_16}\"")));
    assert_eq!(to_json(&[]), "[]");
    assert_eq!(json_str("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    assert_eq!(json_num(f64::INFINITY), "null");
}

proptest::proptest! {
    #[test]
    fn unit_parsers_never_panic(s in "\\PC{0,12}") {
        let _ = parse_count("x", &s);
        let _ = parse_bytes("x", &s);
        let _ = parse_bandwidth("x", &s);
        let _ = parse_duration("x", &s);
        let _ = parse_key_values(&s);
    }

    #[test]
    fn any_small_input_plans_with_finite_numbers_or_says_why(
        nodes in 0u64..6, gpn in 0u64..9, layers in 0u64..13, hidden in 0u64..4097,
        seq in 0u64..2049, mb in 0u64..4, gb in 0u64..65, experts in 0u64..9, top_k in 0u64..3,
        zero in 0u8..5, params in 0.0f64..1e12, tflops in proptest::option::of(0.0f64..1e3),
    ) {
        let cluster = Cluster { nodes, gpus_per_node: gpn, ..two_nodes() };
        let model = Model {
            micro_batch: mb, experts, top_k, zero, tflops,
            ..Model::new(params, layers, hidden, seq, gb)
        };
        if let Ok(p) = plan(&cluster, &model) {
            for e in &p.ranked {
                let nums = [e.comm_time_s, e.bubble, e.tp_time_s, e.pp_time_s, e.ep_time_s,
                    e.dp_time_s, e.mem_per_gpu_bytes(), e.step_time_s.unwrap_or(0.0)];
                proptest::prop_assert!(nums.iter().all(|v| v.is_finite() && *v >= 0.0), "{:?}", e);
                proptest::prop_assert!(e.bubble < 1.0);
            }
        }
    }
}
