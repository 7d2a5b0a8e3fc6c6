package rnettest_test

import (
	"fmt"
	"io"
	"log"
	"net/http"

	"github.com/rnet-dev/rnet/rnet/rnettest"
)

// An HTTP server under test, reached by an http.Client whose transport
// dials the fabric: DialConn is the whole dialer.
func Example_http() {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s", r.URL.Query().Get("name"))
	})}
	go srv.Serve(ln)
	defer srv.Close()

	client := &http.Client{Transport: &http.Transport{DialContext: f.DialConn}}
	resp, err := client.Get("http://" + ln.Addr().String() + "/?name=rdma")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, string(body))
	// Output: 200 OK hello, rdma
}
