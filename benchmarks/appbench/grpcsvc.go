package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
)

// bytesCodec carries []byte messages as they are, so that the service needs
// no generated code.
type bytesCodec struct{}

const codecName = "appbench-bytes"

func (bytesCodec) Name() string { return codecName }

func (bytesCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return nil, fmt.Errorf("%s codec: cannot marshal %T", codecName, v)
}

func (bytesCodec) Unmarshal(data []byte, v any) error {
	if b, ok := v.(*[]byte); ok {
		*b = append((*b)[:0], data...) // gRPC may reuse data once we return
		return nil
	}
	return fmt.Errorf("%s codec: cannot unmarshal into %T", codecName, v)
}

func init() { encoding.RegisterCodec(bytesCodec{}) }

const serviceName = "appbench.Bench"

// Full method names, for ClientConn.Invoke and NewStream.
const (
	methodEcho     = "/" + serviceName + "/Echo"
	methodCounters = "/" + serviceName + "/Counters"
	methodStop     = "/" + serviceName + "/Stop"
	methodDownload = "/" + serviceName + "/Download"
)

// server is what the service's handlers use.
type server struct {
	conns    *connSet
	syscalls *syscallCounter
	stop     chan struct{} // closed by Stop
}

// Requests of the Counters method: the server's totals at the beginning
// and at the end of a workload.
const (
	countersBegin = "begin"
	countersEnd   = "end"
)

// maxStreamMessages bounds what one Download asks for, so that a request
// cannot make the server send without end.
const maxStreamMessages = 1 << 20

func unaryHandler(fn func(s *server, req []byte) ([]byte, error)) grpc.MethodHandler {
	return func(srv any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var req []byte
		if err := dec(&req); err != nil {
			return nil, err
		}
		resp, err := fn(srv.(*server), req)
		if err != nil {
			return nil, err
		}
		return &resp, nil
	}
}

var benchService = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Echo", Handler: unaryHandler(func(_ *server, req []byte) ([]byte, error) { return req, nil })},
		{MethodName: "Counters", Handler: unaryHandler(func(s *server, req []byte) ([]byte, error) {
			var c counters
			var err error
			switch string(req) {
			case countersBegin:
				c, err = beginWork(s.conns, s.syscalls)
			case countersEnd:
				c, err = endWork(s.conns, s.syscalls)
			default:
				return nil, fmt.Errorf("Counters wants %q or %q", countersBegin, countersEnd)
			}
			if err != nil {
				return nil, err
			}
			return json.Marshal(c)
		})},
		{MethodName: "Stop", Handler: unaryHandler(func(s *server, _ []byte) ([]byte, error) {
			select {
			case <-s.stop:
			default:
				close(s.stop)
			}
			return nil, nil
		})},
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Download",
		ServerStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			var req []byte
			if err := stream.RecvMsg(&req); err != nil {
				return err
			}
			count, size, err := parseDownload(req)
			if err != nil {
				return err
			}
			for i := range count {
				// A new message each time: gRPC may still be sending the
				// last one when SendMsg returns.
				msg := make([]byte, size)
				fillPattern(msg, uint32(i))
				if err := stream.SendMsg(&msg); err != nil {
					return err
				}
			}
			return nil
		},
	}},
}

// downloadRequest asks for count messages of size bytes.
func downloadRequest(count, size int) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(count)), uint32(size))
}

func parseDownload(req []byte) (count, size int, err error) {
	if len(req) != 8 {
		return 0, 0, errors.New("Download wants 8 bytes: count and size")
	}
	count, size = int(binary.BigEndian.Uint32(req)), int(binary.BigEndian.Uint32(req[4:]))
	if count > maxStreamMessages || size > maxBodySize {
		return 0, 0, fmt.Errorf("Download of %d messages of %d bytes: at most %d of %d", count, size, maxStreamMessages, maxBodySize)
	}
	return count, size, nil
}
