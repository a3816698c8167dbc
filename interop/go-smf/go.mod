module upf-interop/go-smf

go 1.21

require github.com/wmnsk/go-pfcp v0.0.24
