//go:build cgo

package cm

import (
	"bytes"
	"testing"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// TestPeerMTULimitsPathMTU: on RoCE each side's queue pair runs at a path
// MTU no larger than what ConnParam.PeerMTU reads from the peer's private
// data (the request, when accepting; the reply, when connecting) nor than
// the local port's active MTU; a peer's limit above the port's, or one that
// is no MTU, changes nothing. Disconnect moves the queue pair to the error
// state, as librdmacm does with a queue pair it holds.
func TestPeerMTULimitsPathMTU(t *testing.T) {
	pair := rdmatest.Require(t)
	saying := func(tag string, mtu int) func([]byte) int {
		return func(b []byte) int {
			if bytes.HasPrefix(b, []byte(tag)) {
				return mtu
			}
			return 0
		}
	}
	for _, tc := range []struct {
		name                   string
		clientSays, serverSays int // what the peer's private data says
		// 0: the port's active MTU
		wantClient, wantServer int
	}{
		{name: "limits", clientSays: 512, serverSays: 256, wantClient: 256, wantServer: 512},
		{name: "above the port", clientSays: 4096, serverSays: 4096},
		{name: "no MTU", clientSays: 100, serverSays: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			lch, listener, addr := listen(t, pair.Server)
			defer lch.Close()
			defer listener.Close()
			cch, cid := dialID(t, ctx, pair.Client, addr)
			defer cch.Close()
			client := newEndpoint(t, cid, verbs.AccessLocalWrite)
			defer client.close(t)
			port, err := cid.PortMTU()
			if err != nil {
				t.Fatal(err)
			}
			if port < 1024 {
				t.Skipf("the port's active MTU is %d: too small to see a limit of 512", port)
			}
			want := func(mtu int) int {
				if mtu == 0 {
					return port
				}
				return mtu
			}
			p := RsocketConnParam([]byte("request"))
			p.PeerMTU = saying("reply", tc.serverSays)
			if err := cid.Connect(p); err != nil {
				t.Fatal(err)
			}
			req, err := lch.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if req.Type != EventConnectRequest {
				t.Fatalf("listener got %v", &req)
			}
			sch, err := NewEventChannel()
			if err != nil {
				t.Fatal(err)
			}
			defer sch.Close()
			if err := req.ID.Migrate(sch); err != nil {
				t.Fatal(err)
			}
			server := newEndpoint(t, req.ID, verbs.AccessRemoteWrite)
			defer server.close(t)
			a := RsocketConnParam([]byte("reply"))
			a.ResponderResources, a.InitiatorDepth = req.Param.ResponderResources, req.Param.InitiatorDepth
			a.PeerMTU = saying("request", tc.clientSays)
			if err := req.ID.Accept(a); err != nil {
				t.Fatal(err)
			}
			est, err := cid.Await(ctx, EventEstablished)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(est.Param.PrivateData, []byte("reply")) {
				t.Fatalf("client: ESTABLISHED carries %q, want the reply's private data", est.Param.PrivateData)
			}
			if _, err := req.ID.Await(ctx, EventEstablished); err != nil {
				t.Fatal(err)
			}
			for _, end := range []struct {
				name string
				qp   *verbs.QP
				want int
			}{{"client", client.qp, want(tc.wantClient)}, {"server", server.qp, want(tc.wantServer)}} {
				path, err := end.qp.Path()
				if err != nil {
					t.Fatal(err)
				}
				state, err := end.qp.State()
				if err != nil {
					t.Fatal(err)
				}
				if path.PathMTU != end.want || state != verbs.QPRTS {
					t.Errorf("%s: path MTU %d in state %v, want %d in RTS", end.name, path.PathMTU, state, end.want)
				}
			}
			if err := cid.Disconnect(); err != nil {
				t.Fatal(err)
			}
			if state, err := client.qp.State(); err != nil || state != verbs.QPErr {
				t.Errorf("client after Disconnect: state %v, %v; want the error state", state, err)
			}
			if _, err := req.ID.Await(ctx, EventDisconnected); err != nil {
				t.Fatal(err)
			}
			if err := req.ID.Disconnect(); err != nil {
				t.Fatal(err)
			}
			if _, err := cid.Await(ctx, EventDisconnected); err != nil {
				t.Fatal(err)
			}
		})
	}
}
