// Package ifaces discovers and watches the network interfaces the agent
// attaches to, in the host namespace and in named network namespaces (the
// bind mounts `ip netns add` keeps under /var/run/netns).
//
// A [Watcher] reports every matching interface present at start, then each
// one that appears or disappears, as [Event]s. Each [Interface] carries the
// namespace it lives in and that namespace's kernel cookie ([NetnsCookie]),
// which together with the ifindex identifies it across namespaces, where
// ifindexes repeat.
//
// [InNetns] runs code inside a namespace without ever handing a thread that
// is switched into another namespace back to the Go scheduler; the agent uses
// it to attach tc programs to interfaces of other namespaces. [NetnsPeers]
// reads which namespaces a namespace's devices link into (veth peers,
// tunnel underlays, macvlan/ipvlan lower devices): the agent's zones.
package ifaces
