//! Compile-time checks of the verbs ABI facts that tagmatch depends on.
//!
//! bindgen's own layout assertions (kept on) check every generated struct against the
//! headers it was generated from. The assertions here check the *headers* against what the
//! project wrote down (`shared/spec/wire-layouts.md` §B, x86_64 LP64): if a future
//! `libibverbs-dev` moved a tag-matching field or renumbered an enum, the build fails here
//! instead of the transport silently misreading completions. The constants below are the
//! spec values, so tests and the transport can refer to them by name.

use core::mem::{offset_of, size_of};

use crate::*;

/// Size of `struct ibv_tm_caps` (`verbs.h:313-324`).
pub const TM_CAPS_SIZE: usize = 20;
/// Offset of `tm_caps` inside `struct ibv_device_attr_ex`.
pub const DEVICE_ATTR_EX_TM_CAPS_OFFSET: usize = 348;
/// Size of `struct ibv_tm_cap` (`verbs.h:834-837`).
pub const TM_CAP_SIZE: usize = 8;
/// Offset of `tm_cap` inside `struct ibv_srq_init_attr_ex`.
pub const SRQ_INIT_ATTR_EX_TM_CAP_OFFSET: usize = 56;
/// Size of `struct ibv_ops_wr` (`verbs.h:1256-1272`).
pub const OPS_WR_SIZE: usize = 72;
/// Size of the big-endian tag-matching header `struct ibv_tmh` (`tm_types.h:50-55`).
pub const TMH_SIZE: usize = 16;
/// Size of the big-endian rendezvous header `struct ibv_rvh` (`tm_types.h:57-61`).
pub const RVH_SIZE: usize = 16;
/// Size of `struct ibv_wc_tm_info` (`verbs.h:1562-1565`).
pub const WC_TM_INFO_SIZE: usize = 16;

macro_rules! assert_eq_const {
    ($left:expr, $right:expr) => {
        const _: () = assert!(
            $left == $right,
            concat!(stringify!($left), " != ", stringify!($right))
        );
    };
}

// struct ibv_tm_caps, and where it sits in ibv_device_attr_ex.
assert_eq_const!(size_of::<ibv_tm_caps>(), TM_CAPS_SIZE);
assert_eq_const!(offset_of!(ibv_tm_caps, max_rndv_hdr_size), 0);
assert_eq_const!(offset_of!(ibv_tm_caps, max_num_tags), 4);
assert_eq_const!(offset_of!(ibv_tm_caps, flags), 8);
assert_eq_const!(offset_of!(ibv_tm_caps, max_ops), 12);
assert_eq_const!(offset_of!(ibv_tm_caps, max_sge), 16);
assert_eq_const!(
    offset_of!(ibv_device_attr_ex, tm_caps),
    DEVICE_ATTR_EX_TM_CAPS_OFFSET
);
assert_eq_const!(IBV_TM_CAP_RC, 1);

// struct ibv_tm_cap, and where it sits in ibv_srq_init_attr_ex.
assert_eq_const!(size_of::<ibv_tm_cap>(), TM_CAP_SIZE);
assert_eq_const!(offset_of!(ibv_tm_cap, max_num_tags), 0);
assert_eq_const!(offset_of!(ibv_tm_cap, max_ops), 4);
assert_eq_const!(
    offset_of!(ibv_srq_init_attr_ex, tm_cap),
    SRQ_INIT_ATTR_EX_TM_CAP_OFFSET
);
assert_eq_const!(IBV_SRQT_BASIC, 0);
assert_eq_const!(IBV_SRQT_TM, 2);
assert_eq_const!(IBV_SRQ_INIT_ATTR_TYPE, 1);
assert_eq_const!(IBV_SRQ_INIT_ATTR_PD, 2);
assert_eq_const!(IBV_SRQ_INIT_ATTR_CQ, 8);
assert_eq_const!(IBV_SRQ_INIT_ATTR_TM, 16);

// struct ibv_ops_wr: the table of wire-layouts.md §B.
assert_eq_const!(size_of::<ibv_ops_wr>(), OPS_WR_SIZE);
assert_eq_const!(offset_of!(ibv_ops_wr, wr_id), 0);
assert_eq_const!(offset_of!(ibv_ops_wr, next), 8);
assert_eq_const!(offset_of!(ibv_ops_wr, opcode), 16);
assert_eq_const!(offset_of!(ibv_ops_wr, flags), 20);
assert_eq_const!(offset_of!(ibv_ops_wr, tm.unexpected_cnt), 24);
assert_eq_const!(offset_of!(ibv_ops_wr, tm.handle), 28);
assert_eq_const!(offset_of!(ibv_ops_wr, tm.add.recv_wr_id), 32);
assert_eq_const!(offset_of!(ibv_ops_wr, tm.add.sg_list), 40);
assert_eq_const!(offset_of!(ibv_ops_wr, tm.add.num_sge), 48);
assert_eq_const!(offset_of!(ibv_ops_wr, tm.add.tag), 56);
assert_eq_const!(offset_of!(ibv_ops_wr, tm.add.mask), 64);
assert_eq_const!(IBV_WR_TAG_ADD, 0);
assert_eq_const!(IBV_WR_TAG_DEL, 1);
assert_eq_const!(IBV_WR_TAG_SYNC, 2);
assert_eq_const!(IBV_OPS_SIGNALED, 1);
assert_eq_const!(IBV_OPS_TM_SYNC, 2);

// struct ibv_tmh / ibv_rvh (big-endian on the wire) and enum ibv_tmh_op.
assert_eq_const!(size_of::<ibv_tmh>(), TMH_SIZE);
assert_eq_const!(core::mem::align_of::<ibv_tmh>(), 8);
assert_eq_const!(offset_of!(ibv_tmh, opcode), 0);
assert_eq_const!(offset_of!(ibv_tmh, reserved), 1);
assert_eq_const!(offset_of!(ibv_tmh, app_ctx), 4);
assert_eq_const!(offset_of!(ibv_tmh, tag), 8);
assert_eq_const!(size_of::<ibv_rvh>(), RVH_SIZE);
assert_eq_const!(offset_of!(ibv_rvh, va), 0);
assert_eq_const!(offset_of!(ibv_rvh, rkey), 8);
assert_eq_const!(offset_of!(ibv_rvh, len), 12);
assert_eq_const!(IBV_TMH_NO_TAG, 0);
assert_eq_const!(IBV_TMH_RNDV, 1);
assert_eq_const!(IBV_TMH_FIN, 2);
assert_eq_const!(IBV_TMH_EAGER, 3);

// Work-completion status, opcodes and flags.
assert_eq_const!(IBV_WC_SUCCESS, 0);
assert_eq_const!(IBV_WC_GENERAL_ERR, 21);
assert_eq_const!(IBV_WC_TM_ERR, 22);
assert_eq_const!(IBV_WC_TM_RNDV_INCOMPLETE, 23);
assert_eq_const!(IBV_WC_RECV, 128);
assert_eq_const!(IBV_WC_RECV_RDMA_WITH_IMM, 129);
assert_eq_const!(IBV_WC_TM_ADD, 130);
assert_eq_const!(IBV_WC_TM_DEL, 131);
assert_eq_const!(IBV_WC_TM_SYNC, 132);
assert_eq_const!(IBV_WC_TM_RECV, 133);
assert_eq_const!(IBV_WC_TM_NO_TAG, 134);
assert_eq_const!(IBV_WC_DRIVER1, 135);
assert_eq_const!(IBV_WC_GRH, 1);
assert_eq_const!(IBV_WC_WITH_IMM, 2);
assert_eq_const!(IBV_WC_IP_CSUM_OK, 4);
assert_eq_const!(IBV_WC_WITH_INV, 8);
assert_eq_const!(IBV_WC_TM_SYNC_REQ, 16);
assert_eq_const!(IBV_WC_TM_MATCH, 32);
assert_eq_const!(IBV_WC_TM_DATA_VALID, 64);
assert_eq_const!(IBV_WC_EX_WITH_TM_INFO, 1024);

// struct ibv_wc_tm_info: host-order tag and private data.
assert_eq_const!(size_of::<ibv_wc_tm_info>(), WC_TM_INFO_SIZE);
assert_eq_const!(offset_of!(ibv_wc_tm_info, tag), 0);
assert_eq_const!(offset_of!(ibv_wc_tm_info, priv_), 8);

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-exact TMH/RVH vectors of wire-layouts.md §E.2 written through the C structs.
    #[test]
    fn tmh_and_rvh_vectors_match_the_c_structs() {
        let tmh = ibv_tmh {
            opcode: IBV_TMH_EAGER as u8,
            reserved: [0; 3],
            app_ctx: 0xAABB_CCDDu32.to_be(),
            tag: 0x1122_3344_5566_7788u64.to_be(),
        };
        let mut bytes = [0u8; TMH_SIZE];
        bytes[0] = tmh.opcode;
        bytes[1..4].copy_from_slice(&tmh.reserved);
        bytes[4..8].copy_from_slice(&tmh.app_ctx.to_ne_bytes());
        bytes[8..16].copy_from_slice(&tmh.tag.to_ne_bytes());
        assert_eq!(
            bytes,
            [
                0x03, 0, 0, 0, 0xaa, 0xbb, 0xcc, 0xdd, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                0x88
            ]
        );

        let rvh = ibv_rvh {
            va: 0x0000_7f00_1234_5678u64.to_be(),
            rkey: 0x1234u32.to_be(),
            len: 65536u32.to_be(),
        };
        let mut bytes = [0u8; RVH_SIZE];
        bytes[0..8].copy_from_slice(&rvh.va.to_ne_bytes());
        bytes[8..12].copy_from_slice(&rvh.rkey.to_ne_bytes());
        bytes[12..16].copy_from_slice(&rvh.len.to_ne_bytes());
        assert_eq!(
            bytes,
            [0, 0, 0x7f, 0, 0x12, 0x34, 0x56, 0x78, 0, 0, 0x12, 0x34, 0, 1, 0, 0]
        );
    }
}
