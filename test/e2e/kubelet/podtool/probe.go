package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// probe calls Export and GetFlows of the collector at addr as a pod
// without either right would, and prints one JSON line per call
// ({"case","method","code","message"}), then "probe done":
//   - plaintext: no TLS at all;
//   - client-cert: TLS with a self-signed client certificate of its own
//     (the server is not verified: an intruder does not care);
//   - token:FILE: TLS and the token in FILE as bearer token, for each
//     FILE given (the pod's own ServiceAccount tokens).
func probe(addr string, tokenFiles []string) {
	tlsCfg := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{selfSigned()}}
	try(addr, "plaintext", insecure.NewCredentials())
	try(addr, "client-cert", credentials.NewTLS(tlsCfg))
	for _, f := range tokenFiles {
		tok, err := os.ReadFile(f)
		check(err)
		try(addr, "token:"+f, credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}),
			grpc.WithPerRPCCredentials(bearer(strings.TrimSpace(string(tok)))))
	}
	fmt.Println("probe done")
}

func try(addr, name string, creds credentials.TransportCredentials, opts ...grpc.DialOption) {
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(creds))...)
	check(err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A flow of a node that is not the pod's: what a forger would send.
	err = func() error {
		s, err := flowv1.NewFlowCollectorClient(conn).Export(ctx)
		if err != nil {
			return err
		}
		// Send's error is io.EOF when the server ended the stream: the
		// status is CloseAndRecv's.
		_ = s.Send(&flowv1.FlowBatch{Flows: []*flowv1.Flow{{
			SrcAddr: []byte{192, 0, 2, 1}, DstAddr: []byte{192, 0, 2, 2}, Proto: 17, Packets: 1, Bytes: 60, NodeName: "forged-node",
		}}})
		_, err = s.CloseAndRecv()
		return err
	}()
	report(name, "Export", err)

	err = func() error {
		s, err := flowv1.NewFlowHistoryClient(conn).GetFlows(ctx, &flowv1.GetFlowsRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}()
	report(name, "GetFlows", err)
}

func report(name, method string, err error) {
	st := status.Convert(err) // OK for nil: then the call was answered
	b, _ := json.Marshal(map[string]string{"case": name, "method": method, "code": st.Code().String(), "message": st.Message()})
	fmt.Println(string(b))
}

// bearer is a token as per-call credentials (over TLS only).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// selfSigned is a client certificate no CA of the cluster issued.
func selfSigned() tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "flowlens-kubelet-node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	check(err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
