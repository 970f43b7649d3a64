module github.com/stvp/tempredis

go 1.26.0
