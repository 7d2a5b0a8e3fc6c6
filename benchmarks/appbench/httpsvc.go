package main

import (
	"net/http"
	"strconv"
)

// dataPath answers GET ?size=N&seed=S with the N-byte pattern of seed.
const dataPath = "/data"

// dataHandler serves dataPath.
func dataHandler(w http.ResponseWriter, r *http.Request) {
	size, err1 := strconv.Atoi(r.URL.Query().Get("size"))
	seed, err2 := strconv.ParseUint(r.URL.Query().Get("seed"), 10, 32)
	if err1 != nil || err2 != nil || size < 0 || size > maxBodySize {
		http.Error(w, "want ?size=0.."+strconv.Itoa(maxBodySize)+"&seed=uint32", http.StatusBadRequest)
		return
	}
	body := make([]byte, size)
	fillPattern(body, uint32(seed))
	w.Header().Set("Content-Length", strconv.Itoa(size))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(body)
}

// httpServer serves dataPath over HTTP/1.1 and, with prior knowledge,
// unencrypted HTTP/2 on the same listener.
func httpServer(h http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.Handle(dataPath, h)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{Handler: mux, Protocols: &p}
}
