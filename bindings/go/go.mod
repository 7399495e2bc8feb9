module github.com/qwinfer/qwinfer/bindings/go

go 1.19
