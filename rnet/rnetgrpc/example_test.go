package rnetgrpc_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnetgrpc"
	"github.com/rnet-dev/rnet/rnet/rnettest"
)

// A gRPC client over RDMA: one more option to grpc.NewClient. The stubs
// (here grpc's health service) are used unchanged.
func ExampleDialOption() {
	cc, err := grpc.NewClient("10.77.0.2:50051", // or "passthrough:///10.77.0.2:50051"
		rnetgrpc.DialOption(nil),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthgrpc.NewHealthClient(cc).Check(ctx, &healthgrpc.HealthCheckRequest{})
	if err != nil {
		log.Fatal(err)
	}
	log.Println(resp.GetStatus())
}

// The server side needs no helper: serve an rnet listener.
func Example_server() {
	ln, err := rnet.Listen("rdma", "10.77.0.2:50051")
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	// Register services as usual, e.g. pb.RegisterGreeterServer(s, &server{}).
	if err := s.Serve(ln); err != nil {
		log.Fatal(err)
	}
}

// One server for clients with RDMA and clients without: a dual listener
// takes both on one port, and clients with WithTCPFallback reach it over
// RDMA where they can and over TCP where they cannot.
func Example_withTCPFallback() {
	ln, err := (&rnet.ListenConfig{}).ListenDual(context.Background(), "rdma", ":50051")
	if err != nil {
		log.Fatal(err)
	}
	if err := ln.RDMAError(); err != nil {
		log.Printf("serving over TCP alone: %v", err)
	}
	s := grpc.NewServer()
	go s.Serve(ln)

	cc, err := grpc.NewClient("localhost:50051",
		rnetgrpc.DialOption(nil, rnetgrpc.WithTCPFallback()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
}

// gRPC in a test, on any machine: serve a Listener of an in-memory
// rnettest.Fabric and dial it with FabricDialOption. The Fabric's faults
// (Cut, VanishPeer, HoldCredits, Delay) drive the client's error paths.
func ExampleFabricDialOption() {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", "127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	healthgrpc.RegisterHealthServer(s, health.NewServer())
	go s.Serve(ln)
	defer s.Stop()

	cc, err := grpc.NewClient("passthrough:///127.0.0.1:50051",
		rnetgrpc.FabricDialOption(f),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	resp, err := healthgrpc.NewHealthClient(cc).Check(context.Background(), &healthgrpc.HealthCheckRequest{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.GetStatus())
	// Output: SERVING
}
