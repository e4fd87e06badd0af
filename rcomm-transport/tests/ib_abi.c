/* Prints sizeof and offsetof of the libibverbs structs and fields that
 * rcomm-transport/src/ib/libverbs.rs copies, one "name value" per line, named as
 * libverbs::abi_layout() names them. Built and run by tests/ib_abi.rs against the system's
 * <infiniband/verbs.h>. */
#include <stddef.h>
#include <stdio.h>
#include <infiniband/verbs.h>

#define S(t) printf("%s %zu\n", #t, sizeof(struct t))
#define O(t, f) printf("%s.%s %zu\n", #t, #f, offsetof(struct t, f))

int main(void)
{
	printf("ibv_gid %zu\n", sizeof(union ibv_gid));
	printf("ibv_gid.raw %zu\n", offsetof(union ibv_gid, raw));

	S(ibv_device_attr);
	O(ibv_device_attr, fw_ver);
	O(ibv_device_attr, node_guid);
	O(ibv_device_attr, sys_image_guid);
	O(ibv_device_attr, max_mr_size);
	O(ibv_device_attr, page_size_cap);
	O(ibv_device_attr, vendor_id);
	O(ibv_device_attr, vendor_part_id);
	O(ibv_device_attr, hw_ver);
	O(ibv_device_attr, max_qp);
	O(ibv_device_attr, max_qp_wr);
	O(ibv_device_attr, device_cap_flags);
	O(ibv_device_attr, max_sge);
	O(ibv_device_attr, max_sge_rd);
	O(ibv_device_attr, max_cq);
	O(ibv_device_attr, max_cqe);
	O(ibv_device_attr, max_mr);
	O(ibv_device_attr, max_pd);
	O(ibv_device_attr, max_qp_rd_atom);
	O(ibv_device_attr, max_ee_rd_atom);
	O(ibv_device_attr, max_res_rd_atom);
	O(ibv_device_attr, max_qp_init_rd_atom);
	O(ibv_device_attr, max_ee_init_rd_atom);
	O(ibv_device_attr, atomic_cap);
	O(ibv_device_attr, max_ee);
	O(ibv_device_attr, max_rdd);
	O(ibv_device_attr, max_mw);
	O(ibv_device_attr, max_raw_ipv6_qp);
	O(ibv_device_attr, max_raw_ethy_qp);
	O(ibv_device_attr, max_mcast_grp);
	O(ibv_device_attr, max_mcast_qp_attach);
	O(ibv_device_attr, max_total_mcast_qp_attach);
	O(ibv_device_attr, max_ah);
	O(ibv_device_attr, max_fmr);
	O(ibv_device_attr, max_map_per_fmr);
	O(ibv_device_attr, max_srq);
	O(ibv_device_attr, max_srq_wr);
	O(ibv_device_attr, max_srq_sge);
	O(ibv_device_attr, max_pkeys);
	O(ibv_device_attr, local_ca_ack_delay);
	O(ibv_device_attr, phys_port_cnt);

	S(ibv_port_attr);
	O(ibv_port_attr, state);
	O(ibv_port_attr, max_mtu);
	O(ibv_port_attr, active_mtu);
	O(ibv_port_attr, gid_tbl_len);
	O(ibv_port_attr, port_cap_flags);
	O(ibv_port_attr, max_msg_sz);
	O(ibv_port_attr, bad_pkey_cntr);
	O(ibv_port_attr, qkey_viol_cntr);
	O(ibv_port_attr, pkey_tbl_len);
	O(ibv_port_attr, lid);
	O(ibv_port_attr, sm_lid);
	O(ibv_port_attr, lmc);
	O(ibv_port_attr, max_vl_num);
	O(ibv_port_attr, sm_sl);
	O(ibv_port_attr, subnet_timeout);
	O(ibv_port_attr, init_type_reply);
	O(ibv_port_attr, active_width);
	O(ibv_port_attr, active_speed);
	O(ibv_port_attr, phys_state);
	O(ibv_port_attr, link_layer);
	O(ibv_port_attr, flags);
	O(ibv_port_attr, port_cap_flags2);

	S(ibv_gid_entry);
	O(ibv_gid_entry, gid);
	O(ibv_gid_entry, gid_index);
	O(ibv_gid_entry, port_num);
	O(ibv_gid_entry, gid_type);
	O(ibv_gid_entry, ndev_ifindex);

	S(ibv_context_ops);
	O(ibv_context_ops, poll_cq);
	O(ibv_context_ops, req_notify_cq);
	O(ibv_context_ops, post_send);
	O(ibv_context_ops, post_recv);

	S(ibv_context);
	O(ibv_context, device);
	O(ibv_context, ops);
	O(ibv_context, cmd_fd);
	O(ibv_context, async_fd);
	O(ibv_context, num_comp_vectors);
	O(ibv_context, mutex);
	O(ibv_context, abi_compat);

	S(ibv_pd);
	O(ibv_pd, context);
	O(ibv_pd, handle);

	S(ibv_mr);
	O(ibv_mr, context);
	O(ibv_mr, pd);
	O(ibv_mr, addr);
	O(ibv_mr, length);
	O(ibv_mr, handle);
	O(ibv_mr, lkey);
	O(ibv_mr, rkey);

	S(ibv_comp_channel);
	O(ibv_comp_channel, context);
	O(ibv_comp_channel, fd);
	O(ibv_comp_channel, refcnt);
	S(ibv_cq);
	O(ibv_cq, context);
	O(ibv_cq, channel);
	O(ibv_cq, cq_context);
	O(ibv_cq, handle);
	O(ibv_cq, cqe);
	O(ibv_cq, mutex);
	O(ibv_cq, cond);
	O(ibv_cq, comp_events_completed);
	O(ibv_cq, async_events_completed);

	S(ibv_qp);
	O(ibv_qp, context);
	O(ibv_qp, qp_context);
	O(ibv_qp, pd);
	O(ibv_qp, send_cq);
	O(ibv_qp, recv_cq);
	O(ibv_qp, srq);
	O(ibv_qp, handle);
	O(ibv_qp, qp_num);
	O(ibv_qp, state);
	O(ibv_qp, qp_type);
	O(ibv_qp, mutex);
	O(ibv_qp, cond);
	O(ibv_qp, events_completed);

	S(ibv_qp_cap);
	O(ibv_qp_cap, max_send_wr);
	O(ibv_qp_cap, max_recv_wr);
	O(ibv_qp_cap, max_send_sge);
	O(ibv_qp_cap, max_recv_sge);
	O(ibv_qp_cap, max_inline_data);

	S(ibv_qp_init_attr);
	O(ibv_qp_init_attr, qp_context);
	O(ibv_qp_init_attr, send_cq);
	O(ibv_qp_init_attr, recv_cq);
	O(ibv_qp_init_attr, srq);
	O(ibv_qp_init_attr, cap);
	O(ibv_qp_init_attr, qp_type);
	O(ibv_qp_init_attr, sq_sig_all);

	S(ibv_global_route);
	O(ibv_global_route, dgid);
	O(ibv_global_route, flow_label);
	O(ibv_global_route, sgid_index);
	O(ibv_global_route, hop_limit);
	O(ibv_global_route, traffic_class);

	S(ibv_ah_attr);
	O(ibv_ah_attr, grh);
	O(ibv_ah_attr, dlid);
	O(ibv_ah_attr, sl);
	O(ibv_ah_attr, src_path_bits);
	O(ibv_ah_attr, static_rate);
	O(ibv_ah_attr, is_global);
	O(ibv_ah_attr, port_num);

	S(ibv_qp_attr);
	O(ibv_qp_attr, qp_state);
	O(ibv_qp_attr, cur_qp_state);
	O(ibv_qp_attr, path_mtu);
	O(ibv_qp_attr, path_mig_state);
	O(ibv_qp_attr, qkey);
	O(ibv_qp_attr, rq_psn);
	O(ibv_qp_attr, sq_psn);
	O(ibv_qp_attr, dest_qp_num);
	O(ibv_qp_attr, qp_access_flags);
	O(ibv_qp_attr, cap);
	O(ibv_qp_attr, ah_attr);
	O(ibv_qp_attr, alt_ah_attr);
	O(ibv_qp_attr, pkey_index);
	O(ibv_qp_attr, alt_pkey_index);
	O(ibv_qp_attr, en_sqd_async_notify);
	O(ibv_qp_attr, sq_draining);
	O(ibv_qp_attr, max_rd_atomic);
	O(ibv_qp_attr, max_dest_rd_atomic);
	O(ibv_qp_attr, min_rnr_timer);
	O(ibv_qp_attr, port_num);
	O(ibv_qp_attr, timeout);
	O(ibv_qp_attr, retry_cnt);
	O(ibv_qp_attr, rnr_retry);
	O(ibv_qp_attr, alt_port_num);
	O(ibv_qp_attr, alt_timeout);
	O(ibv_qp_attr, rate_limit);

	S(ibv_sge);
	O(ibv_sge, addr);
	O(ibv_sge, length);
	O(ibv_sge, lkey);

	S(ibv_send_wr);
	O(ibv_send_wr, wr_id);
	O(ibv_send_wr, next);
	O(ibv_send_wr, sg_list);
	O(ibv_send_wr, num_sge);
	O(ibv_send_wr, opcode);
	O(ibv_send_wr, send_flags);
	O(ibv_send_wr, imm_data);
	O(ibv_send_wr, wr);
	O(ibv_send_wr, wr.rdma.remote_addr);
	O(ibv_send_wr, wr.rdma.rkey);
	O(ibv_send_wr, qp_type);
	O(ibv_send_wr, bind_mw);

	S(ibv_recv_wr);
	O(ibv_recv_wr, wr_id);
	O(ibv_recv_wr, next);
	O(ibv_recv_wr, sg_list);
	O(ibv_recv_wr, num_sge);

	S(ibv_wc);
	O(ibv_wc, wr_id);
	O(ibv_wc, status);
	O(ibv_wc, opcode);
	O(ibv_wc, vendor_err);
	O(ibv_wc, byte_len);
	O(ibv_wc, imm_data);
	O(ibv_wc, qp_num);
	O(ibv_wc, src_qp);
	O(ibv_wc, wc_flags);
	O(ibv_wc, pkey_index);
	O(ibv_wc, slid);
	O(ibv_wc, sl);
	O(ibv_wc, dlid_path_bits);

	S(ibv_async_event);
	O(ibv_async_event, element);
	O(ibv_async_event, element.cq);
	O(ibv_async_event, element.qp);
	O(ibv_async_event, element.port_num);
	O(ibv_async_event, event_type);
	return 0;
}
