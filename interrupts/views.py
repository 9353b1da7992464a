"""Server-rendered pages. Views read through selectors and never write models."""

from django.shortcuts import render

from . import selectors


def home(request):
    return render(request, "interrupts/home.html", {"overview": selectors.overview()})
