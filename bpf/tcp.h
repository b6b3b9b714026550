/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Feature "tcp": TCP connection health per flow (docs/tcp.md). Go side:
 * internal/agent/feature/tcp. The kernel side follows the record model.
 */
#ifndef FLOWLENS_TCP_H
#define FLOWLENS_TCP_H

#endif
