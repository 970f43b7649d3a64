module github.com/panjf2000/gnet/v2

require (
	github.com/panjf2000/ants/v2 v2.11.3
	github.com/stretchr/testify v1.10.0
	github.com/valyala/bytebufferpool v1.0.0
	go.uber.org/zap v1.27.0
	golang.org/x/sync v0.11.0
	golang.org/x/sys v0.30.0
	gopkg.in/natefinch/lumberjack.v2 v2.2.1
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

go 1.20
