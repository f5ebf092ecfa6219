package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	basiccrud "github.com/kumiko-go/kumiko/samples/basic-crud"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "basic-crud"}, basiccrud.Feature)
}