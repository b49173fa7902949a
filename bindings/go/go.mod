module github.com/pipeforge/pipeforge-go

go 1.19
