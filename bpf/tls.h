/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "tls": TLS usage per flow, from the handshake the TC programs
 * see. A ServerHello gives the flow it travels on (server -> client) the
 * negotiated version (its supported_versions extension for TLS 1.3, else its
 * legacy version), the cipher suite and the key-share group; a ClientHello
 * marks the client's flow; a QUIC long-header packet marks a UDP flow. No
 * payload is kept. Go side: internal/agent/feature/tls; docs/tls.md.
 *
 * Cost: on every TCP or UDP packet with a payload, while the feature is on,
 * a look at its first six bytes (a TLS handshake record starts 0x16 0x03; a
 * QUIC long header has a known version): a load from the linear data, or a
 * bpf_skb_load_bytes copy when the payload is in page fragments (TCP from
 * a local socket); only a hello is parsed further. Off (tls_on 0), nothing
 * is compiled in.
 */
#ifndef FLOWLENS_TLS_H
#define FLOWLENS_TLS_H

#include "enrich.h"
#include "parse.h"
#include "xlatkey.h"

volatile const __u32 tls_on = 0;

#define TLS_MAX_EXTENSIONS 16
#define TLS_EXT_SUPPORTED_VERSIONS 0x002b
#define TLS_EXT_KEY_SHARE 0x0033

/* tls_entry is the enrichment entry of the flow's key before NAT
 * (bpf/xlatkey.h), where the hellos are kept. */
static __always_inline struct enrich_value *tls_entry(const struct flow_key *pk, const struct iface_obs *me)
{
	__u32 gen = generation();
	struct flow_key key;
	const struct flow_key *k = xlat_on ? &key : pk;
	if (xlat_on) {
		key = *pk;
		xlat_inspect_key(&key, me, gen);
	}
	return enrich_entry(k, gen);
}

/* Not inlined: its enrichment value on the stack would add to the TC
 * programs' deepest call chain (512 bytes for all frames). */
static __noinline void tls_mark(const struct flow_key *pk, const struct iface_obs *me, __u8 flag)
{
	struct enrich_value *e = tls_entry(pk, me);
	if (e)
		e->tls_flags |= flag;
}

static __always_inline int load16(struct __sk_buff *skb, __u32 off, __u16 *v)
{
	if (bpf_skb_load_bytes(skb, off, v, 2))
		return -1;
	*v = bpf_ntohs(*v);
	return 0;
}

/* server_hello reads a ServerHello whose handshake message starts at off,
 * for the flow's key before NAT (bpf/xlatkey.h). */
static __noinline void server_hello(struct __sk_buff *skb, const struct flow_key *pk, const struct iface_obs *me,
				    __u32 off)
{
	__u16 version, cipher, extlen, group = 0;
	__u8 sid;
	/* type(1) length(3), then legacy_version(2) random(32) session_id */
	if (load16(skb, off + 4, &version) || bpf_skb_load_bytes(skb, off + 38, &sid, 1) || sid > 32)
		return;
	__u32 q = off + 39 + sid;
	if (load16(skb, q, &cipher) || load16(skb, q + 3, &extlen)) /* cipher, compression(1) */
		return;
	q += 5;
	__u32 end = q + extlen;
	for (int i = 0; i < TLS_MAX_EXTENSIONS && q + 4 <= end; i++) {
		__u16 type, len;
		if (load16(skb, q, &type) || load16(skb, q + 2, &len))
			break;
		if (type == TLS_EXT_SUPPORTED_VERSIONS && len == 2)
			load16(skb, q + 4, &version);
		else if (type == TLS_EXT_KEY_SHARE && len >= 2)
			load16(skb, q + 4, &group); /* the server's one share: its group first */
		q += 4 + len;
	}
	struct enrich_value *e = tls_entry(pk, me);
	if (!e)
		return;
	e->tls_version = version;
	e->tls_cipher = cipher;
	e->tls_group = group;
	e->tls_flags |= TLS_F_SERVER_HELLO;
}

static __always_inline int quic_version(__u32 v)
{
	return v == 0x00000001 || v == 0x6b3343cf || (v & 0xffffff00) == 0xff000000;
}

/* tls_inspect looks at the start of the packet's payload for a hello
 * (after record(): see bpf/xlatkey.h). */
static __always_inline void tls_inspect(struct __sk_buff *skb, const struct pkt *p, const struct iface_obs *me)
{
	if (!p->payload)
		return;
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u8 *b = data + (p->payload & 0xfff); /* bounded for the verifier */
	__u8 copy[6];
	if ((void *)(b + 6) > data_end) {
		/* A payload outside the linear data (a TCP segment from a local
		 * socket lives in page fragments): copy its first bytes. */
		if (skb->len < p->payload + 6 || bpf_skb_load_bytes(skb, p->payload, copy, 6))
			return;
		b = copy;
	}
	if (p->key.proto == IPPROTO_TCP) {
		/* A handshake record (0x16, version 3.x) whose first message is
		 * a ClientHello (1) or a ServerHello (2). */
		if (b[0] != 0x16 || b[1] != 0x03)
			return;
		if (b[5] == 1)
			tls_mark(&p->key, me, TLS_F_CLIENT_HELLO);
		else if (b[5] == 2)
			server_hello(skb, &p->key, me, p->payload + 5);
	} else if (p->key.proto == IPPROTO_UDP) {
		/* QUIC long header: form and fixed bits, then a known version. */
		if ((b[0] & 0xc0) == 0xc0 && quic_version((__u32)b[1] << 24 | (__u32)b[2] << 16 | (__u32)b[3] << 8 | b[4]))
			tls_mark(&p->key, me, TLS_F_QUIC);
	}
}

#endif
