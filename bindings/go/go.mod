module pipeforge

go 1.19
