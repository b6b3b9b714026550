package flowpb

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// MaxAgentInstanceBytes bounds FlowBatch.agent_instance: a node name (253
// bytes), "/" and a process id, with room to spare.
const MaxAgentInstanceBytes = 320

// The FlowBatch fields of ExportAcked's batch identity.
const (
	batchFieldInstance protowire.Number = 2
	batchFieldSeq      protowire.Number = 3
)

// AppendBatchID appends FlowBatch's agent_instance and seq fields to b (a
// FlowBatch is its fields in any order: these, then the flows of
// AppendFlow, make one message). They take BatchIDLen(instance) bytes,
// whatever seq.
func AppendBatchID(b []byte, instance string, seq uint64) []byte {
	b = protowire.AppendTag(b, batchFieldInstance, protowire.BytesType)
	b = protowire.AppendString(b, instance)
	b = protowire.AppendTag(b, batchFieldSeq, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, seq)
}

// BatchIDLen is the length of AppendBatchID's fields for instance.
func BatchIDLen(instance string) int {
	return protowire.SizeTag(batchFieldInstance) + protowire.SizeBytes(len(instance)) +
		protowire.SizeTag(batchFieldSeq) + protowire.SizeFixed64()
}

// BatchID reads the agent_instance and seq of FlowBatch wire bytes,
// skipping the flows by their lengths. A missing field is zero; an
// instance longer than MaxAgentInstanceBytes or with a byte outside
// '!'..'~' is an error, as are bytes that do not frame (ErrMalformed).
func BatchID(b []byte) (instance string, seq uint64, err error) {
	var inst []byte
	for len(b) > 0 {
		num, typ, v, rest, err := consumeField(b)
		if err != nil {
			return "", 0, malformed("FlowBatch", err)
		}
		b = rest
		switch {
		case num == batchFieldInstance && typ == protowire.BytesType:
			inst, _ = protowire.ConsumeBytes(v)
		case num == batchFieldSeq && typ == protowire.Fixed64Type:
			seq, _ = protowire.ConsumeFixed64(v)
		}
	}
	if err := CheckAgentInstance(inst); err != nil {
		return "", 0, err
	}
	return string(inst), seq, nil
}

// CheckAgentInstance checks an agent_instance against its bound: at most
// MaxAgentInstanceBytes bytes of printable ASCII without spaces (it names
// the agent in the collector's logs and acknowledgement state).
func CheckAgentInstance[S ~string | ~[]byte](s S) error {
	if len(s) > MaxAgentInstanceBytes {
		return fmt.Errorf("agent_instance: %d bytes, max %d", len(s), MaxAgentInstanceBytes)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '!' || s[i] > '~' {
			return errors.New("agent_instance: a byte outside printable ASCII")
		}
	}
	return nil
}
