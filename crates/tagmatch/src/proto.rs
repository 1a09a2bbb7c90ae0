//! The protocol node behind an [`Endpoint`](crate::Endpoint), and whether it may have
//! work since it was last found quiet.
//!
//! An in-process endpoint with the fast path skips most device polls while its protocol
//! side is quiet (see `Endpoint::device_due`): nothing in flight, no output, no
//! completion, no unexpected protocol message. Finding that out takes a dozen loads;
//! instead, [`ProtoNode::get_mut`] (the only mutable access to the node) marks it busy,
//! and the full look is taken only while it is marked. What changes the node's state
//! without a mutable access is the network queueing a packet for the device, which the
//! device's mail flag tells.

use std::ops::Deref;

use tagmatch_transport::Node;

use crate::endpoint::Device;

/// A protocol node with a busy mark.
#[derive(Debug)]
pub(crate) struct ProtoNode {
    node: Node<Device>,
    /// Something may have changed since the node was last found quiet.
    busy: bool,
}

impl ProtoNode {
    pub(crate) fn new(node: Node<Device>) -> ProtoNode {
        ProtoNode { node, busy: true }
    }

    /// The node, to change it: marks it busy (the next progress looks at it in full).
    #[inline(always)]
    pub(crate) fn get_mut(&mut self) -> &mut Node<Device> {
        self.busy = true;
        &mut self.node
    }

    /// Whether the node may have work since it was last found quiet.
    #[inline(always)]
    pub(crate) fn busy(&self) -> bool {
        self.busy
    }

    /// The node was just found quiet (nothing in flight, queued or held).
    #[inline(always)]
    pub(crate) fn set_quiet(&mut self) {
        self.busy = false;
    }
}

impl Deref for ProtoNode {
    type Target = Node<Device>;

    #[inline(always)]
    fn deref(&self) -> &Node<Device> {
        &self.node
    }
}
