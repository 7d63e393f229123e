from twinkle.cli import main

main()
