package resume

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// A resume request and its answers cross a TCP connection's bytes whole,
// and what a peer could send wrong is refused.
func TestTCPHandshakeFrames(t *testing.T) {
	pd, err := EncodeRequest(testConnData(), Request{Kind: Resume, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	req, err := EncodeTCPRequest(pd)
	if err != nil {
		t.Fatal(err)
	}
	if !IsTCPRequest(req[:len(TCPMagic)]) || IsTCPRequest([]byte("GET / HT")) {
		t.Fatal("IsTCPRequest does not tell a resume request from HTTP")
	}
	got, err := ReadTCPRequest(bytes.NewReader(req))
	if err != nil || !bytes.Equal(got, pd) {
		t.Fatalf("ReadTCPRequest = %x, %v; want %x", got, err, pd)
	}
	if r, err := ParseRequest(got); err != nil || r.Kind != Resume || r.Token != testToken {
		t.Fatalf("ParseRequest of what was read: %+v, %v", r, err)
	}

	rep := testReply()
	rep.TCP = true
	rpd, err := EncodeReply(testConnData(), rep)
	if err != nil {
		t.Fatal(err)
	}
	ans, err := EncodeTCPReply(TCPAccepted, rpd)
	if err != nil {
		t.Fatal(err)
	}
	status, gotRep, err := ReadTCPReply(bytes.NewReader(ans))
	if err != nil || status != TCPAccepted || !bytes.Equal(gotRep, rpd) {
		t.Fatalf("ReadTCPReply = %d, %x, %v", status, gotRep, err)
	}
	refusal, _ := EncodeTCPReply(6, nil)
	if status, pd, err := ReadTCPReply(bytes.NewReader(refusal)); err != nil || status != 6 || pd != nil {
		t.Fatalf("a refusal reads as %d, %x, %v", status, pd, err)
	}

	for name, b := range map[string][]byte{
		"another magic":    append([]byte("RNETRSM2"), req[8:]...),
		"a longer request": append(append(append([]byte{}, req[:8]...), RequestPrivateData+1), append(pd, 0)...),
		"a shorter one":    append(append(append([]byte{}, req[:8]...), RequestPrivateData-1), pd[:RequestPrivateData-1]...),
	} {
		if _, err := ReadTCPRequest(bytes.NewReader(b)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ReadTCPRequest: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := ReadTCPRequest(bytes.NewReader(req[:20])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a cut request: %v", err)
	}
	for _, n := range []byte{0, 59, MaxReplyPrivateData + 1, 255} {
		b := append([]byte{TCPAccepted, n}, make([]byte, int(n))...)
		if _, _, err := ReadTCPReply(bytes.NewReader(b)); !errors.Is(err, ErrMalformed) {
			t.Errorf("a reply of %d bytes: %v, want ErrMalformed", n, err)
		}
	}
	if _, err := EncodeTCPRequest(pd[:40]); err == nil {
		t.Error("EncodeTCPRequest took 40 bytes")
	}
}
